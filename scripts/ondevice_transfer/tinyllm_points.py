#!/usr/bin/env python3
"""Points of UbiquitousLearning/TinyLLMLeaderBoard data.json (commit 874c304) for ondevice_cells.yaml (issue 37, llama.cpp x cpu).

Every row whose phone and model the registry can run is taken, both phases; every point validates (the file's rule).
Usage: tinyllm_points.py DATA_JSON [ONDEVICE_REPORT] > points.yaml  (data.json: git show 874c304:data.json in that
repository; ONDEVICE_REPORT: the output of `mobisim ondevice`, whose errors decide which points carry a cause: written
after the residuals were seen, as the registry README asks).
"""
import json
import sys

DEVICES = {"Xiaomi 14": "xiaomi-14", "MEIZU 18Pro": "meizu-18-pro", "Pixel 7Pro": "pixel-7-pro", "Xiaomi 12S": "xiaomi-12s"}
# leaderboard name -> (id slug, mobisim model, why the shapes are that profile's); tied classifiers are in TIED
MODELS = {
    "LLaMA 7B": ("llama-7b", "llama-2-7b", "LLaMA 7B has Llama-2-7B's shapes (32 layers, 4096 wide, 11008 FFN, 32000 vocabulary)"),
    "LLaMA 2 7B": ("llama-2-7b", "llama-2-7b", ""),
    "Vigogne (French) 7B": ("vigogne-7b", "llama-2-7b", "Vigogne 7B is a LLaMA 7B fine-tune (Llama-2-7B's shapes)"),
    "Vicuna 7B": ("vicuna-7b", "llama-2-7b", "Vicuna 7B is a LLaMA fine-tune (Llama-2-7B's shapes)"),
    "Koala 7B": ("koala-7b", "llama-2-7b", "Koala 7B is a LLaMA 7B fine-tune (Llama-2-7B's shapes)"),
    "Pygmalion/Metharme 7B": ("pygmalion-metharme-7b", "llama-2-7b", "Pygmalion/Metharme 7B is a LLaMA 7B fine-tune (Llama-2-7B's shapes)"),
    "WizardLM 7B": ("wizardlm-7b", "llama-2-7b", "WizardLM 7B is a LLaMA 7B fine-tune (Llama-2-7B's shapes)"),
    "Baichuan 2-7B": ("baichuan2-7b", "baichuan2-7b", ""),
    "Qwen 1.5 1.8B": ("qwen1.5-1.8b", "qwen1.5-1.8b", ""),
    "Qwen 1.5 0.5B": ("qwen1.5-0.5b", "qwen1.5-0.5b", ""),
    "Qwen 1.8B": ("qwen-1.8b", "qwen1.5-1.8b", "Qwen-1.8B has Qwen1.5-1.8B's shapes"),
    # Added with their profiles (issue 37, H2); each profile cites its config.json.
    "Chinese LLaMA / Alpaca 7B": ("chinese-llama-alpaca-7b", "chinese-alpaca-2-7b",
                                  "The row evaluates Chinese-Alpaca-2-7B-GGUF (its performance.model): Llama-2-7B's blocks "
                                  "with a 55296-token vocabulary"),
    "Baichuan 1-7B": ("baichuan-7b", "baichuan-7b", ""),
    "Aquila  2-7B": ("aquila2-7b", "aquila-7b", "Aquila2-7B as released in 2023 has Aquila-7B's shapes (AquilaChat2-7B "
                     "config.json; the rows give both models the same memory)"),
    "Aquila  1-7B": ("aquila-7b", "aquila-7b", ""),
    "Yi models 6B": ("yi-6b", "yi-6b", ""),
    "StableLM-3b-4e1t 3B": ("stablelm-3b-4e1t", "stablelm-3b-4e1t", ""),
    "Deepseek LLM 7B": ("deepseek-llm-7b", "deepseek-llm-7b", ""),
    "Qwen 1.5 7B": ("qwen1.5-7b", "qwen-7b", "Qwen1.5-7B has Qwen-7B's shapes (only rope_theta differs)"),
    "Qwen 1.5 4B": ("qwen1.5-4b", "qwen1.5-4b", ""),
    "Qwen 7B": ("qwen-7b", "qwen-7b", ""),
    # Added with their profiles (issue 37, H3): the plain-MLP models (ffn: plain); each profile cites its config.json.
    "Falcon 7B": ("falcon-7b", "falcon-7b", "Falcon-7B's classifier rows are 4544 wide, not a multiple of Q6_K's 256: "
                  "llama_tensor_get_type's fallback for such a tensor (convert_incompatible_tensor) stores it Q8_0, "
                  "classifier_dtype: int8"),
    "Persimmon 8B": ("persimmon-8b", "persimmon-8b", ""),
    "MPT 7B": ("mpt-7b", "mpt-7b", ""),
    "Bloom 7B": ("bloom-7b", "bloom-7b1", "The row evaluates BLOOM-7B1 (its performance.model: bloom-7b1; the three Bloom "
                 "rows all link bigscience/bloom-1b7)"),
    "Bloom 560m": ("bloom-560m", "bloom-560m", "The row evaluates BLOOM-560M (its performance.model: bloom-560m; the three "
                   "Bloom rows all link bigscience/bloom-1b7)"),
    "Bloom 1.1B": ("bloom-1.1b", "bloom-1b1", "The row evaluates BLOOM-1B1 (its performance.model: bloom-1b1; the three "
                   "Bloom rows all link bigscience/bloom-1b7)"),
}
# The 0.5B-1.8B models whose fixed per-node costs the small-model causes name.
SMALL = {"qwen1.5-0.5b", "qwen1.5-1.8b"}
# The 2.8-4.0B models, whose decode the decode-mid cause names, and the profile of the 5.0-5.1 GB Qwen 7B files.
MID = {"stablelm-3b-4e1t", "qwen1.5-4b"}
FIVE_GB = {"qwen-7b"}
TIED = {"qwen1.5-0.5b"}
# Classifiers quantize cannot store in Q6_K (a row length not a multiple of 256): Q8_0 (issue 37, H3).
CLASSIFIER_DTYPE = {"falcon-7b": "int8"}
# The 0.56B and 1.07B BLOOMs (250880-token tables), whose 14-15-token prefills the prefill-small-bloom cause names, and
# the models of 5.7-6.5 GB (the rows' memory) that the 8 GB Meizu 18 Pro runs out of page cache for (issue 37, H3).
SMALL_BLOOM = {"bloom-560m", "bloom-1b1"}
OVER_MEIZU = {"persimmon-8b", "bloom-7b1"}
# Tied in the checkpoint: quantised as the classifier whichever tensor the GGUF file gives it (issue 37, H3).
TIED_ANY = {"falcon-7b", "mpt-7b", "bloom-7b1", "bloom-560m", "bloom-1b1"}
COMMON = ("github.com/UbiquitousLearning/TinyLLMLeaderBoard data.json (commit 874c304, 2024-05-21; the leaderboard of the "
          "EdgeFM'24 measurement study; src/App.tsx: \"Performance Metrics tested with llama.cpp library\", devices \"Xiaomi "
          "12S(Snapdragon8Gen1,12G Memory),Meizu 18Pro(Snapdragon888,8G Memory),Pixel 7Pro(Google Tensor2,12G Memory),Xiaomi "
          "14(Snapdragon8Gen3,16G Memory)\"; src/Table.tsx shows the 4th field of each latency string as Tok/s)")
ASSUMED = ("Not stated, assumed: the llama.cpp build (data of 2024-05-21 or before: Q4_0 weights in the plain CPU buffer, "
           "the vec_dot class; repacked Q4_0 came in 2024-07), its ISA flags (llama.cpp's README of the time builds for "
           "Android with -DCMAKE_C_FLAGS=-march=armv8.4a+dotprod: no __ARM_FEATURE_MATMUL_INT8, so SDOT kernels; "
           "cpu_isa_detected: [dotprod]), the INT4 type (Q4_0; llama.cpp's quantize stores the classifier, or the token "
           "embedding a tied classifier reads, in Q6_K: llama_tensor_get_type), the threads (llama.cpp's default then, "
           "get_num_physical_cores(): every core)")


I8MM_PHONES = {"xiaomi-14", "xiaomi-12s"}
CAUSES = {
    "prefill-i8mm": "the build ran SDOT (cpu_isa_detected: [dotprod]: llama.cpp's Android instructions of the time compiled "
                    "with -march=armv8.4a+dotprod, and ggml's SMMLA kernels exist only under __ARM_FEATURE_MATMUL_INT8) at "
                    "the vec_dot share fitted on PocketPal PR #702's Oryon run on every core; that build's matmuls gave each "
                    "thread an even share (ggml before PR #6915: nr0/nth rows; llamafile's tinyBLAS_Q0_ARM from 2024-04: "
                    "ceil(tiles/nth)), so the A510/A520 little cores set each matmul's end (not modelled: no per-core "
                    "share of these cores is measured)",
    "prefill-dotprod": "every core on SDOT at the vec_dot share fitted on an Oryon SMMLA run; that build's matmuls gave each "
                       "thread an even share (ggml before PR #6915: nr0/nth rows; llamafile's tinyBLAS_Q0_ARM from 2024-04: "
                       "ceil(tiles/nth)), so with llama.cpp's default of every core the four Cortex-A55s (one 128-bit SDOT "
                       "per cycle) set each matmul's end (not modelled: no per-core share of these cores is measured)",
    "prefill-small": "a prompt of 8-13 tokens on a 0.5B-1.8B model is not compute-bound at the build's SDOT rate: a fixed cost "
                     "per graph node (ggml of 2024 synchronised its threads after every node, llama.cpp's default of every "
                     "core including the little ones) weighs as in decode; the engine charges call_overhead_us 5 per op "
                     "(assumed; no per-node sync cost of that build measured on these phones was found)",
    "decode-small": "decode of a 0.5B-1.8B model at 11-33 tok/s on every phone alike: a per-token cost that does not scale "
                    "with the weight bytes (every node of every layer a barrier across all threads, llama.cpp's default of "
                    "every core including the little ones) dominates; the engine charges call_overhead_us 5 per op "
                    "(assumed), and decode streams the weights and the Q6_K classifier at one DRAM share fitted on PR "
                    "#702's 1.7B Oryon run",
    "decode-meizu": "the Meizu 18 Pro has 8 GB (TinyLLMLeaderBoard) for a 3.9-4.8 GB model file: page-cache pressure on "
                    "the mmap'd weights (llama.cpp's default) is not modelled; its DRAM figure is the 888's LPDDR5-6400 spec",
    # Written after the residuals of the models added in H2 were seen (issue 37): the 3-4B decodes do not follow the
    # phones' bandwidth, and the Qwen 7B files are larger than the range decode-meizu states.
    "decode-mid": "decode of a 2.8-4.0B model (StableLM-3B-4E1T, Qwen1.5-4B) at 7-13 tok/s that does not follow the "
                  "phones' DRAM bandwidth (the Xiaomi 12S is the fastest of the four phones, the Xiaomi 14, with the most "
                  "bandwidth, second): a per-token cost that does not scale with the weight bytes (every node of 32-40 "
                  "layers a barrier across all threads, llama.cpp's default of every core including the little ones), as "
                  "for the 0.5B-1.8B models; the engine charges call_overhead_us 5 per op (assumed), and decode streams the "
                  "weights and the Q6_K classifier at one DRAM share fitted on PR #702's 1.7B Oryon run",
    "decode-meizu-5gb": "the Meizu 18 Pro has 8 GB (TinyLLMLeaderBoard) for a model of 5.0-5.1 GB (the rows' memory for "
                        "Qwen 7B and Qwen 1.5 7B, whose 151936-token tables are the largest of the 7B files): page-cache "
                        "pressure on the mmap'd weights (llama.cpp's default) is not modelled; its DRAM figure is the "
                        "888's LPDDR5-6400 spec",
    # Written after the residuals of the plain-MLP models added in H3 were seen (issue 37).
    "prefill-small-bloom": "a prompt of 14-15 tokens on BLOOM-560M or BLOOM-1B1 is not compute-bound at the build's "
                           "SDOT rate: a fixed cost per graph node (ggml of 2024 synchronised its threads after every "
                           "node, llama.cpp's default of every core including the little ones) weighs as in decode; the "
                           "engine charges call_overhead_us 5 per op (assumed). And if the build predates llama.cpp PR "
                           "#6122 (2024-03, which skips the logits of unused positions), the 250880-row classifier ran "
                           "on every prompt token, not only the last the engine charges: 1.5-1.75x the work charged "
                           "(the build is not stated)",
    "meizu-over-5.5gb": "the Meizu 18 Pro has 8 GB (TinyLLMLeaderBoard) for a model of 5.7-6.5 GB (the rows' memory for "
                        "Bloom 7B and Persimmon 8B): the rows run 2.3-2.8x (prefill) and 5.6-17x (decode, 0.73 and 0.20 "
                        "tok/s) below the same models on the Pixel 7 Pro, as if the mmap'd weights (llama.cpp's default) "
                        "no longer stayed in the page cache and were read again from flash; not modelled, and its DRAM "
                        "figure is the 888's LPDDR5-6400 spec",
    "other": "the vec_dot class and DRAM share fitted on PocketPal PR #702's Oryon run, on a 2024 build whose version and "
             "threads are not stated",
}


def cause_of(dev, phase, model):
    if dev == "meizu-18-pro" and model in OVER_MEIZU:
        return CAUSES["meizu-over-5.5gb"]
    if phase == "prefill" and model in SMALL_BLOOM:
        return CAUSES["prefill-small-bloom"]
    if phase == "decode" and model in SMALL_BLOOM:
        return CAUSES["decode-small"]
    if phase == "prefill":
        if model in SMALL:
            return CAUSES["prefill-small"]
        return CAUSES["prefill-i8mm" if dev in I8MM_PHONES else "prefill-dotprod"]
    if model in SMALL:
        return CAUSES["decode-small"]
    if model in MID:
        return CAUSES["decode-mid"]
    if dev == "meizu-18-pro":
        return CAUSES["decode-meizu-5gb" if model in FIVE_GB else "decode-meizu"]
    return CAUSES["other"]


def errors_of(report):
    out = {}
    if report:
        for line in open(report):
            f = line.split()
            if line.startswith("ondevice.") and len(f) > 3 and f[3].endswith("%"):
                out[f[0]] = float(f[3].rstrip("%"))
    return out


def q(s):
    return "'" + s.replace("'", "''") + "'"


def main():
    rows = json.load(open(sys.argv[1]))
    errors = errors_of(sys.argv[2] if len(sys.argv) > 2 else None)
    out = []
    for r in rows:
        if r["name"] not in MODELS or r["device"] not in DEVICES or r["quantization"] != "INT4":
            continue
        slug, model, shapes = MODELS[r["name"]]
        dev = DEVICES[r["device"]]
        pre = r["prefilling_latency"].split("/")
        dec = r["decoding_latency"].split("/")
        prompt = int(float(pre[1]))
        generated = int(float(dec[1]))
        context = prompt + generated // 2
        row = json.dumps({k: r[k] for k in ("name", "device", "quantization", "decoding_latency", "prefilling_latency")})
        # Tied or not: llama_tensor_get_type gives the output (or tied token_embd) Q6_K, Q8_0 if its rows do not fit.
        cls = f", classifier_dtype: {CLASSIFIER_DTYPE.get(model, 'int6')}"
        extra = (" " + shapes + ".") if shapes else ""
        tied = (" Tied classifier: the Q6_K token embedding (llama_tensor_get_type quantises token_embd as the output "
                "tensor when the file has none).") if model in TIED else ""
        if model in TIED_ANY:
            tied = (" Tied classifier, quantised as the classifier either way (llama_tensor_get_type): as the output "
                    "tensor a converter writes (llama.cpp's convert-hf-to-gguf.py copies MPT's and Bloom's token "
                    "embedding to output.weight) or as the token embedding when the file has none.")
        for phase in ("prefill", "decode"):
            if phase == "prefill":
                pid = f"ondevice.{dev}.llama.cpp.tinyllm-{slug}.prefill-{prompt}.cpu"
                what = f"{prompt} prompt tokens in {pre[0]} ms, {pre[3]} tok/s"
                value, tokens, qty = float(pre[3]), prompt, f"llama.cpp CPU prefill rate, {r['name']} INT4, {prompt}-token prompt"
            else:
                pid = f"ondevice.{dev}.llama.cpp.tinyllm-{slug}.decode.cpu"
                what = (f"{generated} tokens at {dec[2]} ms per token, {dec[3]} tok/s (context {prompt} to {prompt + generated}: "
                        f"the probe takes the middle, {context})")
                value, tokens, qty = float(dec[3]), context, f"llama.cpp CPU decode rate, {r['name']} INT4"
            out.append(f"- id: {pid}")
            out.append(f"  source: {q(f'{COMMON}, row {row}: {what}.{extra}{tied} {ASSUMED}')}")
            out.append(f"  quantity: {q(qty)}")
            out.append(f"  published: {value}")
            out.append("  unit: tokens_per_s")
            out.append("  role: validation")
            out.append(f"  probe: {{impl: ondevice, device: {dev}, engine: llama.cpp, model: {model}, unit: cpu, phase: {phase}, "
                       f"tokens: {tokens}, dtype: int4{cls}, activation_dtype: int8, cpu_kernels: vec_dot, cpu_isa_detected: [dotprod], metric: tokens_per_s}}")
            if abs(errors.get(pid, 0.0)) > 25:
                out.append("  cause_kind: mechanism")
                out.append(f"  cause: {q(cause_of(dev, phase, model))}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
