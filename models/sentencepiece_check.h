#pragma once
// Structural checks of a SentencePiece model file that libsentencepiece does not make itself.
//
// SentencePiece trusts the normalizer's precompiled character map (a Darts-clone double-array trie
// followed by the NUL-terminated replacement strings): a corrupt trie makes Encode() read outside
// the map (a crash found by tests/fuzz/fuzz_tokenizer.cpp). Before handing a file to the library,
// `check_sentencepiece_model` walks the protobuf wire format down to every precompiled map
// (normalizer_spec and denormalizer_spec, field 2) and follows every trie path a lookup can take:
// each child read must stay inside the array and each replacement must start inside the strings
// and end with a NUL there. Throws InputError naming the file and what is wrong.
#include <string>
#include <string_view>

namespace mobisim::models {

void check_sentencepiece_model(std::string_view model_bytes, const std::string& path);

// The map alone (exposed for tests): `blob` is precompiled_charsmap's bytes.
void check_precompiled_charsmap(std::string_view blob, const std::string& where);

}  // namespace mobisim::models
