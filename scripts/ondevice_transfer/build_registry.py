# Builds experiments/published/ondevice_transfer.yaml from the collected points and applies the
# calibration rule of docs/ondevice_data.md mechanically (it never reads a residual).
import yaml, sys, collections
HVX_ENGINES = {'llama.cpp'}   # issue 37 item 2: llama.cpp's Hexagon backend runs on HVX (devices/npu.h)
CPU_CLASS_BASE = {('mnn', 'hybrid'): 'int8_tiled'}   # configs/engines/mnn.yaml: hybrid = int8_tiled's share, split equally

MODEL_B = {'qwen2.5-0.5b':0.49,'llama-3.2-1b':1.24,'qwen2.5-1.5b':1.54,'qwen3-1.7b':1.72,'qwen1.5-1.8b':1.84,
           'llama-3.2-3b':3.21,'mistral-7b':7.25,'llama-2-7b':6.74,'baichuan2-7b':7.5,'qwen2.5-7b':7.62,'llama-3-8b':8.03}
SOC_YEAR = {'xiaomi-12':2021,'redmi-k70':2022,'iphone-14-pro':2022,'iphone-15-pro':2023,'oneplus-12':2023,
            'galaxy-s24':2023,'xiaomi-14-pro':2023,'snapdragon-8-gen3-device':2023,'snapdragon-8-elite-qrd':2024,
            'snapdragon-8-elite-gen5-qrd':2025,'poco-myron':2025,'galaxy-s22':2021,'pixel-8-pro':2023,'galaxy-s23':2022,'xiaomi-17':2025,'realme-gt8-pro':2025,'galaxy-s23-ultra':2022,'galaxy-s20-plus':2020}

AIHUB = ("Qualcomm AI Hub Models v0.46.1 (github.com/quic/ai-hub-models, commit 52c080d2), "
         "qai_hub_models/models/{m}/perf.yaml, precision {p}, {dev}, runtime {rt}: ")
P = []   # (source_key, source, id_suffix, quantity, published, unit, probe)
def add(src_key, source, device, engine, model, unit, phase, published, metric='tokens_per_s', quantity='',
        idx='', **probe):
    pr = dict(impl='ondevice', device=device, engine=engine)
    if 'runtime' in probe: pr['runtime'] = probe.pop('runtime')   # the engine's runtime path (engine `runtimes`)
    pr.update(model=model, unit=unit, phase=phase)
    pr.update(probe); pr['metric'] = metric
    P.append(dict(key=src_key, source=source, quantity=quantity, published=published, unit=metric, probe=pr,
                  idx=idx))

# ---- QNN (Genie / QNN context binaries): AI Hub perf.yaml -------------------------------------------
def aihub(m, prec, dev_name, device, model, rt, tps, tmin, tmax, ctx=4096, note=''):
    src = AIHUB.format(m=m, p=prec, dev=dev_name, rt=rt) + \
        f"tokens_per_second {tps}, time_to_first_token_range_milliseconds min {tmin} / max {tmax}, context_length {ctx}" + \
        " (TTFT range: lower bound = one 128-token prompt-processor pass, upper = the full context, as the model cards state)" + note
    k = 'aihub-perf-yaml'
    add(k, src, device, 'qnn', model, 'npu', 'decode', tps, quantity=f'{m} response rate ({ctx}-token static KV cache)',
        idx=f'{m}.decode', tokens=ctx, dtype='int4', activation_dtype='fp16')
    if tmin is not None:
        add(k, src, device, 'qnn', model, 'npu', 'prefill', tmin, metric='ms', quantity=f'{m} time to first token, 128-token prompt',
            idx=f'{m}.prefill-128', tokens=128, chunk=128, dtype='int4', activation_dtype='fp16')
        add(k, src, device, 'qnn', model, 'npu', 'prefill', tmax, metric='ms', quantity=f'{m} time to first token, {ctx}-token prompt',
            idx=f'{m}.prefill-{ctx}', tokens=ctx, chunk=128, dtype='int4', activation_dtype='fp16')
g5 = ('Snapdragon 8 Elite Gen 5 QRD', 'snapdragon-8-elite-gen5-qrd')
e8 = ('Snapdragon 8 Elite QRD', 'snapdragon-8-elite-qrd')
aihub('llama_v3_2_1b_instruct','w4a16',*g5,'llama-3.2-1b','genie',64.04112,30.937,990.003)
aihub('llama_v3_2_1b_instruct','w4a16',*e8,'llama-3.2-1b','genie',53.6399,37.0651,1186.0832)
aihub('llama_v3_2_3b_instruct','w4a16',*g5,'llama-3.2-3b','genie',29.48402,58.016,1856.531)
aihub('llama_v3_2_3b_instruct','w4a16',*e8,'llama-3.2-3b','genie',23.4718,88.195,2822.25)
aihub('llama_v3_8b_instruct','w4a16',*g5,'llama-3-8b','genie',15.30721,102.882,3292.227)
aihub('llama_v3_1_8b_instruct','w4a16',*g5,'llama-3-8b','genie',14.91757,109.992,3519.753,
      note='; Llama 3.1 8B has Llama 3 8B\'s shapes (configs/models/llama-3-8b.yaml)')
aihub('llama_v3_1_8b_instruct','w4a16',*e8,'llama-3-8b','genie',13.0546,154.517,4944.544,
      note='; Llama 3.1 8B has Llama 3 8B\'s shapes (configs/models/llama-3-8b.yaml)')
aihub('qwen2_5_7b_instruct','w4a16',*e8,'qwen2.5-7b','qnn_context_binary',15.40274,135.6538,4340.9216)
aihub('llama_v2_7b_chat','w4a16','Samsung Galaxy S24','galaxy-s24','llama-2-7b','qnn_context_binary',12.85,None,None,ctx=1024,
      note='; its TTFT min = max = 1495.83 ms names no prompt length, so only the response rate is a point')
aihub('llama_v2_7b_chat','w4a16',*e8,'llama-2-7b','qnn_context_binary',17.94,None,None,ctx=1024,
      note='; its TTFT min = max = 1440.0 ms names no prompt length, so only the response rate is a point')
add('executorch-7411', 'github.com/pytorch/executorch/issues/7411 (description, 2024-12-20): "I ran Llama-v3.2-3B-Chat(precision w4a16) from ai-hub-model on a Snapdragon 8 Gen 3 device, achieving 20 tokens/s"',
    'snapdragon-8-gen3-device','qnn','llama-3.2-3b','npu','decode',20.0, quantity='AI Hub Llama-v3.2-3B-Chat (w4a16) token rate',
    idx='aihub-llama-3.2-3b.decode', tokens=4096, dtype='int4', activation_dtype='fp16')

# ---- ExecuTorch QNN backend ---------------------------------------------------------------------------
add('executorch-7411', 'github.com/pytorch/executorch/issues/7411 (description, 2024-12-20): "I ran inference for the Llama3.2-3B model quantized to W4A16 using executorch with the QNN backend on the same device [a Snapdragon 8 Gen 3 device]. The performance I observed was 10 tokens/s" (context length not given; 128 for the probe: the default of both ExecuTorch QNN llama flows of that date, export_llama\'s --max_seq_length and examples/qualcomm/oss_scripts/llama3_2/llama.py\'s --seq_len, executorch a396b47663, 2024-12-20)',
    'snapdragon-8-gen3-device','executorch','llama-3.2-3b','npu','decode',10.0, quantity='ExecuTorch QNN Llama-3.2-3B (w4a16) token rate',
    idx='llama-3.2-3b.decode', tokens=128, dtype='int4', activation_dtype='fp16')
src = ('github.com/pytorch/executorch/pull/20587 (description, 2026-06-29): "Specs used: SM8750, QNN2.37, 16a8w, context_len=128", table "Token/Sec": '
       '`llama3_2-1b` 29, `qwen2_5-0_5b` 130 (SM8750 device not named: the Snapdragon 8 Elite QRD profile stands for the SoC; 16a8w = 8-bit weights, 16-bit activations)')
add('executorch-20587', src, 'snapdragon-8-elite-qrd','executorch','llama-3.2-1b','npu','decode',29.0, quantity='ExecuTorch QNN llama3_2-1b (16a8w) token rate, context 128',
    idx='llama-3.2-1b.decode', tokens=128, dtype='int8', activation_dtype='fp16')
add('executorch-20587', src, 'snapdragon-8-elite-qrd','executorch','qwen2.5-0.5b','npu','decode',130.0, quantity='ExecuTorch QNN qwen2_5-0_5b (16a8w) token rate, context 128',
    idx='qwen2.5-0.5b.decode', tokens=128, dtype='int8', activation_dtype='fp16')

# ---- llama.cpp Hexagon (HTP) backend ---------------------------------------------------------------
src = ('ggml-org/llama.cpp docs/backend/hexagon/README.md (commit 37c56d57), "How to Run": Llama-3.2-1B-Instruct-Q4_0 on a Snapdragon device '
       'whose log reads "Hexagon Arch version v79" (Snapdragon 8 Elite; model not named: the 8 Elite QRD profile stands for the SoC): ')
k = 'llamacpp-hexagon-readme'
add(k, src + 'llama-bench "pp128 | 169.42 ± 1.75" (HTP, n_batch 128)', 'snapdragon-8-elite-qrd','llama.cpp','llama-3.2-1b','npu','prefill',169.42,
    quantity='llama-bench pp128 on HTP0', idx='llama-3.2-1b.pp128', tokens=128, chunk=128, dtype='int4', activation_dtype='int8')
add(k, src + 'llama-bench "tg64 | 51.54 ± 1.13" (context 0-64: the probe takes 32)', 'snapdragon-8-elite-qrd','llama.cpp','llama-3.2-1b','npu','decode',51.54,
    quantity='llama-bench tg64 on HTP0', idx='llama-3.2-1b.tg64', tokens=32, dtype='int4', activation_dtype='int8')
add(k, src + 'run-completion "prompt eval time = 80.76 ms / 11 tokens ( 7.34 ms per token, 136.21 tokens per second)"', 'snapdragon-8-elite-qrd','llama.cpp','llama-3.2-1b','npu','prefill',136.21,
    quantity='llama-completion prompt eval, 11 tokens', idx='llama-3.2-1b.prompt-11', tokens=11, chunk=128, dtype='int4', activation_dtype='int8')
add(k, src + 'run-completion "eval time = 9210.59 ms / 475 runs ( 19.39 ms per token, 51.57 tokens per second)" (context 11-486: the probe takes 248)', 'snapdragon-8-elite-qrd','llama.cpp','llama-3.2-1b','npu','decode',51.57,
    quantity='llama-completion eval, 475 tokens after 11', idx='llama-3.2-1b.eval-475', tokens=248, dtype='int4', activation_dtype='int8')

# ---- llama.cpp CPU / OpenCL via llama.rn (pocketpal-ai bench) --------------------------------------
src = ('github.com/a-ghorbani/pocketpal-ai/pull/702 (comment 2026-04-28, "First Adreno A8X baseline - POCO Myron (Snapdragon 8 Elite Gen 5 / Adreno 840v2)"), '
       'table "Qwen3 1.7B", row {q}: {col} {v} (llama.rn = llama.cpp; the comment gives no prompt length; the runner of that date benched pp=512 tg=128 (DEFAULT_BENCH, BenchmarkRunnerScreen.tsx at pocketpal-ai 789d7d9a, whose baseline holds the 2026-04-28 reports), which the probe takes; tg from an empty cache: context 64)')
# How PR #702's CPU cells ran (docs/cpu_isa_sources.md, "llama.cpp's CPU kernels by build"): every layer offloaded to the CPU device
# (n_gpu_layers 99), so no CPU_REPACK buffer: the vec_dot kernel class; PocketPal's 6 threads. PR #713/#722/#740: repack, 6 threads.
CPU_702 = dict(cpu_kernels='vec_dot', threads=6)
CPU_LATER = dict(threads=6)
for q, dt, cpp, ctg, gpp, gtg in [('q4_0','int4',99.9,30.4,629.0,28.1), ('q8_0','int8',100.0,25.7,558.2,26.0)]:
    for unit, col, v, phase in [('cpu','CPU pp',cpp,'prefill'),('cpu','CPU tg',ctg,'decode'),('gpu','GPU pp',gpp,'prefill'),('gpu','GPU tg',gtg,'decode')]:
        add('pocketpal-702', src.format(q=q, col=col, v=v), 'poco-myron','llama.cpp','qwen3-1.7b',unit,phase,v,
            quantity=f'{col} (Qwen3 1.7B {q})', idx=f'qwen3-1.7b-{q}.{"pp" if phase=="prefill" else "tg"}',
            tokens=(512 if phase=='prefill' else 64) if unit=='cpu' else (256 if phase=='prefill' else 32), dtype=dt,
            activation_dtype='int8' if unit=='cpu' else 'fp16', **(CPU_702 if unit=='cpu' else {}))

# ---- llama.cpp OpenCL (Qualcomm engineers, 8 Elite Gen 5) --------------------------------------------
src = ('ggml-org/llama.cpp PR #18871 (description, 2026-01-15): "On 8 Elite Gen 5, master:" llama-bench table, "qwen2 1.5B Q8_0 | 1.53 GiB | 1.54 B | OpenCL | 99 | {t} | {v}" '
       '(device not named: the 8 Elite Gen 5 QRD profile stands for the SoC; qwen2 1.5B = Qwen2/2.5-1.5B shapes)')
for t, v in [('pp128',151.12),('pp512',158.08),('pp1024',156.69),('pp2048',153.38),('tg128',23.69),('tg256',23.81)]:
    n = int(t[2:]); ph = 'prefill' if t.startswith('pp') else 'decode'
    add('llamacpp-18871', src.format(t=t, v=v), 'snapdragon-8-elite-gen5-qrd','llama.cpp','qwen2.5-1.5b','gpu',ph,v,
        quantity=f'llama-bench {t} (OpenCL, Q8_0, master before the PR)', idx=f'qwen2.5-1.5b-q8_0.{t}',
        tokens=n if ph=='prefill' else n//2, dtype='int8', activation_dtype='fp16')
src = ('ggml-org/llama.cpp PR #22755 (comment by lhez, 2026-05-08, "I was able to reproduce your results on A840 with Qwen3-1.7B-f16"), with GGML_OPENCL_ADRENO_XMEM_GEMM=1: '
       '"qwen3 1.7B F16 | 3.78 GiB | 2.03 B | OpenCL | 99 | {t} | {v}" (Adreno 840 = Snapdragon 8 Elite Gen 5; device not named)')
for t, v in [('pp512',394.43),('tg128',13.60)]:
    n = int(t[2:]); ph = 'prefill' if t.startswith('pp') else 'decode'
    add('llamacpp-22755', src.format(t=t, v=v), 'snapdragon-8-elite-gen5-qrd','llama.cpp','qwen3-1.7b','gpu',ph,v,
        quantity=f'llama-bench {t} (OpenCL, F16, xmem GEMM)', idx=f'qwen3-1.7b-f16.{t}',
        tokens=n if ph=='prefill' else n//2, dtype='fp16', activation_dtype='fp16')

# ---- MNN CPU: mnn-llm README (Xiaomi 12) ---------------------------------------------------------------
src = ('github.com/wangzhaode/mnn-llm README.md (revision before effc141, 2024-06), "CPU 4线程速度: prefill / decode tok/s", column "android(f16/32)", row {r}: {v} '
       '(device table: "android | XiaoMi12 | Snapdragon 8gen1 | 8 GB"; the benchmark, demo/cli_demo.cpp benchmark() at 2af82db, runs the three short prompts of resource/prompt.txt in the model\'s chat template: the probe takes one 128-token prefill{extra})')
# MNN 2.8.0 (this build) and a980dba3 (the iPhone 15 Pro's) run the low-memory ConvolutionHybrid, which splits each
# linear's output channels equally among the threads: the engine's `hybrid` kernel class (configs/engines/mnn.yaml).
MNN_HYBRID = dict(cpu_kernels='hybrid')
# Activations: the README's first table (2af82db) tags each row w4a16 or w4a32; 58d6ada renamed the rows and kept the
# column "android(f16/32)". Baichuan2-7B's values are the tagged w4a32 run's (unchanged since); Llama-2-7B's were
# replaced by a new run in 58d6ada, whose activations are not stated (fp16 assumed, as the column's first dtype).
for r, model, dt, act, pre, dec, extra in [('qwen-1.8b-int4','qwen1.5-1.8b','int4','fp16',100.21,22.22,'; Qwen-1.8B has Qwen1.5-1.8B\'s shapes'),
                                      ('qwen-1.8b-int8','qwen1.5-1.8b','int8','fp16',99.95,16.94,'; Qwen-1.8B has Qwen1.5-1.8B\'s shapes'),
                                      ('baichuan2-7b-int4','baichuan2-7b','int4','fp32',13.87,6.08,'; 2af82db tags the row baichuan2-7b-w4a32: fp32 activations'),
                                      ('llama-2-7b-int4','llama-2-7b','int4','fp16',17.98,5.17,'; 2af82db tags an earlier run llama-2-7b-w4a32 (12.83 / 3.73), replaced by these values in 58d6ada without a tag: fp16 activations assumed')]:
    s = src.format(r=r, v=f'{pre} / {dec}', extra=extra)
    add('mnn-llm-readme', s, 'xiaomi-12','mnn',model,'cpu','prefill',pre, quantity=f'CPU prefill, 4 threads ({r})', idx=f'{r}.prefill', tokens=128, dtype=dt, activation_dtype=act, **MNN_HYBRID)
    add('mnn-llm-readme', s, 'xiaomi-12','mnn',model,'cpu','decode',dec, quantity=f'CPU decode, 4 threads ({r})', idx=f'{r}.decode', tokens=128, dtype=dt, activation_dtype=act, **MNN_HYBRID)

# ---- MNN CPU on iOS: MNN transformers/llm/engine/ios/README.md ---------------------------------------
src = ('github.com/alibaba/MNN transformers/llm/engine/ios/README.md (commit of the MNN mirror HEAD), section "速度": "{m}" "{d}: pefill {p} tok/s, decode {q} tok/s" '
       '(MNN iOS demo, CPU backend; the README\'s {prompts}: the probe takes 128 tokens{extra})')
# The iPhone 14 Pro rows (mnn-llm commit 92d745b, 2023-12-15) ran the prebuilt mnn_2.8.0_ios_llm.zip: MNN 2.8.0's
# iOS feature detection (source/backend/cpu/CPURuntime.cpp, hw.cpufamily) sets dot but not i8mm for the A16
# (i8mm from 2.8.1), so its int8 GEMMs ran SDOT (docs/cpu_isa_sources.md, "MNN's feature detection by build").
MNN_280_IOS = dict(cpu_isa_detected=['dotprod'], **MNN_HYBRID)
for m, d, dev, model, dt, pre, dec, extra, build in [
        ('Qwen-1.8b-chat 4bit','iPhone 14 Pro','iphone-14-pro','qwen1.5-1.8b','int4',102.63,33.53,'; Qwen-1.8B has Qwen1.5-1.8B\'s shapes', MNN_280_IOS),
        ('Qwen-1.8b-chat 8bit','iPhone 14 Pro','iphone-14-pro','qwen1.5-1.8b','int8',105.41,25.45,'; Qwen-1.8B has Qwen1.5-1.8B\'s shapes', MNN_280_IOS),
        ('Qwen2-0.5b-instruct 4bit','iPhone 15 Pro','iphone-15-pro','qwen2.5-0.5b','int4',234.51,51.36,'; Qwen2-0.5B has Qwen2.5-0.5B\'s shapes', MNN_HYBRID),
        ('Qwen2-1.5b-instruct 4bit','iPhone 15 Pro','iphone-15-pro','qwen2.5-1.5b','int4',107.64,25.57,'; Qwen2-1.5B has Qwen2.5-1.5B\'s shapes', MNN_HYBRID)]:
    prompts = ('old prompts, the three short lines of mnn-llm\'s resource/prompt.txt' if dev == 'iphone-14-pro'
               else 'new prompts, the four lines of resource/bench.txt')
    s = src.format(m=m, d=d, p=pre, q=dec, extra=extra, prompts=prompts)
    tag = m.split()[0].lower() + '-' + m.split()[-1]
    add('mnn-ios-readme', s, dev,'mnn',model,'cpu','prefill',pre, quantity=f'CPU prefill ({m})', idx=f'{tag}.prefill', tokens=128, dtype=dt, activation_dtype='fp16', **build)
    add('mnn-ios-readme', s, dev,'mnn',model,'cpu','decode',dec, quantity=f'CPU decode ({m})', idx=f'{tag}.decode', tokens=128, dtype=dt, activation_dtype='fp16', **build)

# ---- mllm NPU (llm.npu code path) ----------------------------------------------------------------------
add('mllm-206', 'github.com/UbiquitousLearning/mllm/issues/206 (description, 2024-12-02): OnePlus 12 (8gen3, 24 GB), demo_qwen_npu, qwen-1.5-1.8b-chat-int8: "Prefill Tokens: 1022 ... Prefill Speed: 102.256 tokens/s"',
    'oneplus-12','mllm','qwen1.5-1.8b','npu','prefill',102.256, quantity='NPU prefill throughput, 1022-token prompt', idx='qwen1.5-1.8b.prefill-1022',
    tokens=1022, chunk=256, dtype='int8', activation_dtype='int8')
add('mllm-299', 'github.com/UbiquitousLearning/mllm/issues/299 (description, 2025-07-10): Xiaomi 14 Pro (Snapdragon 8gen3, 16GB), qwen-1.5-1.8B on the NPU, "the prefill speed is about 170 tokens/s when I set `s=256`"',
    'xiaomi-14-pro','mllm','qwen1.5-1.8b','npu','prefill',170.0, quantity='NPU prefill throughput, 256-token prompt', idx='qwen1.5-1.8b.prefill-256',
    tokens=256, chunk=256, dtype='int8', activation_dtype='int8')


# ---- more QNN (AI Hub perf.yaml v0.46.1) -------------------------------------------------------------
aihub('qwen2_7b_instruct','w4a16',*e8,'qwen2.5-7b','qnn_context_binary',13.65,170.593,5458.976,
      note='; Qwen2-7B has Qwen2.5-7B\'s shapes (configs/models/qwen2.5-7b.yaml)')
aihub('mistral_7b_instruct_v0_3','w4a16',*e8,'mistral-7b','qnn_context_binary',12.56,165.65,5300.8,
      note='; a later release of the card ondevice_public.yaml quotes at v0.31.0')

# ---- ExecuTorch XNNPACK CPU: README revisions ---------------------------------------------------------
src = ('pytorch/executorch examples/models/llama2/README.md (revision e172c5ce35, 2024-09-26), "Llama 2 7B performance was measured on the Samsung Galaxy S22, S24, and OnePlus 12 devices ... adb binary-based approach", '
       'table row "{d} | ... | {v} tokens/second" in column "Groupwise 4-bit (256)"')
for d, dev, v in [('Galaxy S22','galaxy-s22',8.3),('Galaxy S24','galaxy-s24',11.26),('OnePlus 12','oneplus-12',11.6)]:
    add('executorch-llama2-readme', src.format(d=d, v=v), dev,'executorch','llama-2-7b','cpu','decode',v,
        quantity='decode throughput, groupwise 4-bit (256)', idx='llama-2-7b-g256.decode', tokens=128, dtype='int4', group_size=256, activation_dtype='int8')
src = ('pytorch/executorch examples/models/llama2/README.md (revision 34f59edd86, 2024-04-24, "Performance"): "{d}** | {a} tokens/second | {b} tokens/second" '
       '(Groupwise 4-bit (128) | (256); "**: Measured via app based workflow"{extra})')
for d, dev, a, b, extra in [('Galaxy S22','galaxy-s22',5.5,5.9,''),('iPhone 15 pro','iphone-15-pro',6.0,6.0,'; the README prints "~6"')]:
    for gs, v in [(128, a), (256, b)]:
        add('executorch-llama2-readme-app', src.format(d=d, a=('~' if extra else '')+str(a), b=('~' if extra else '')+str(b), extra=extra), dev,'executorch','llama-2-7b','cpu','decode',v,
            quantity=f'decode throughput in the demo app, groupwise 4-bit ({gs})', idx=f'llama-2-7b-g{gs}-app.decode', tokens=128, dtype='int4', group_size=gs, activation_dtype='int8')

# ---- MLC-LLM OpenCL on Mali (lm-Meter) -------------------------------------------------------------------
src = ('github.com/amai-gsu/LM-Meter README.md (commit 058c884c), "Phase-level profiling accuracy on Pixel 8 Pro" (MLC LLM, Android GPU OpenCL): {m} "Decode" row, '
       'LM-METER {v} ms (per decode step; quantisation not stated: q4f16_1, MLC\'s default, assumed; context not stated: 128 assumed{extra})')
for m, model, v, extra in [('Llama-3.2-3B-Instruct','llama-3.2-3b',62.5669,''),('DeepSeek-R1-Distill-Qwen-1.5B','qwen2.5-1.5b',49.3840,'; the distill has Qwen2.5-1.5B\'s shapes')]:
    add('lm-meter-readme', src.format(m=m, v=v, extra=extra), 'pixel-8-pro','mlc',model,'gpu','decode',v, metric='ms',
        quantity=f'MLC decode step latency ({m})', idx=f'{model}.decode', tokens=128, dtype='int4', activation_dtype='fp16')

# ---- mllm QNN AOT (full graph on the NPU) ------------------------------------------------------------------
src = ('chenghuawang.github.io/News/2026-01-29-mllm-qnn-aot-support-en (the mllm README\'s "technical report"): "the Qwen3 1.7B model Using W4A16KV8 quantization configuration, chunk=32, pad=1024, '
       'running on Qualcomm SM8650 achieved a performance of 758.28 tokens/s for prefill and 25.84 tokens/s for decode in a scenario with 640 prefill tokens and 128 decode tokens" '
       '(SM8650 device not named)')
add('mllm-qnn-aot-report', src, 'snapdragon-8-gen3-device','mllm','qwen3-1.7b','npu','prefill',758.28, quantity='QNN AOT prefill throughput, 640 tokens, chunk 32',
    idx='qwen3-1.7b-aot.prefill-640', runtime='aot', tokens=640, chunk=32, dtype='int4', activation_dtype='fp16', kv_dtype='int8')
add('mllm-qnn-aot-report', src, 'snapdragon-8-gen3-device','mllm','qwen3-1.7b','npu','decode',25.84, quantity='QNN AOT decode throughput, 128 tokens after 640 (context 704 taken)',
    idx='qwen3-1.7b-aot.decode', runtime='aot', tokens=704, dtype='int4', activation_dtype='fp16', kv_dtype='int8')


# ---- llama.rn (llama.cpp) bench comments, pocketpal-ai PRs #722 and #740 -----------------------------------
# PR #722's two Myron tables: base columns 586.7/28.7 and 204.8/37.5 for qwen3-1.7b/q4_0 are PR #740's PR-713 GPU and CPU
# values for poco-myron, which identifies them as the GPU and CPU tables.
src722 = ('github.com/a-ghorbani/pocketpal-ai/pull/722 (comment 2026-05-12, bench params "pp=256, tg=64, pl=1, nr=3"), poco-myron {u} table '
          '(identified by its base column, PR #740\'s PR-713 {U} value for qwen3-1.7b/q4_0), row "qwen3-1.7b/{q}": {col} {v} (the PR-722 value)')
for unit, U, rows in [('gpu','GPU',[('q4_0','int4',643.4,34.9),('q8_0','int8',548.2,27.4),('q6_k','int6',385.6,21.8)]),
                      ('cpu','CPU',[('q4_0','int4',302.4,38.6),('q8_0','int8',308.1,28.2),('q6_k','int6',143.1,26.3)])]:
    for q, dt, pp, tg in rows:
        for ph, col, v in [('prefill','pp',pp),('decode','tg',tg)]:
            add('pocketpal-722', src722.format(u=unit, U=U, q=q, col=col, v=v), 'poco-myron','llama.cpp','qwen3-1.7b',unit,ph,v,
                quantity=f'llama.rn {col} {"256" if col=="pp" else "64"} (Qwen3 1.7B {q}, {U}, llama.rn 0.12.0)', idx=f'qwen3-1.7b-{q}-722.{col}',
                tokens=256 if ph=='prefill' else 32, dtype=dt, activation_dtype='int8' if unit=='cpu' else 'fp16',
                **(CPU_LATER if unit=='cpu' else {}))
src740 = ('github.com/a-ghorbani/pocketpal-ai/pull/740 (comment 2026-05-24, "pp=256 tg=64 pl=1 nr=3", cpu+hex flash_attn on), "focused" representative-cell table, '
          'row "{d} | {b}": {col} PR-740 {v} (the representative cell is qwen3-1.7b/q4_0: its PR-713 GPU and CPU values for poco-myron are the base '
          'column of PR #722\'s qwen3-1.7b/q4_0 rows)')
for d, dev, b, unit, pp, tg in [('poco-myron','poco-myron','cpu','cpu',212.1,38.0),('poco-myron','poco-myron','gpu','gpu',536.7,27.1),
                                ('poco-myron','poco-myron','hexagon','npu',720.0,30.4),('samsung-s23','galaxy-s23','cpu','cpu',110.2,17.1),
                                ('samsung-s23','galaxy-s23','gpu','gpu',264.3,16.6),('samsung-s23','galaxy-s23','hexagon','npu',459.9,20.9)]:
    for ph, col, v in [('prefill','pp',pp),('decode','tg',tg)]:
        extra = dict(chunk=256) if unit == 'npu' and ph == 'prefill' else CPU_LATER if unit == 'cpu' else {}
        add('pocketpal-740', src740.format(d=d, b=b, col=col, v=v), dev,'llama.cpp','qwen3-1.7b',unit,ph,v,
            quantity=f'llama.rn {col} {"256" if col=="pp" else "64"} (Qwen3 1.7B q4_0, {b}, llama.rn 0.12.3)', idx=f'qwen3-1.7b-q4_0-740.{col}',
            tokens=256 if ph=='prefill' else 32, dtype='int4', activation_dtype='fp16' if unit=='gpu' else 'int8', **extra)


# ---- llama.cpp OpenCL on Adreno 830 (Snapdragon 8 Elite; devices not named: the 8 Elite QRD profile stands for the SoC) ----
src = ('ggml-org/llama.cpp PR #16469 (lhez, description 2025-10-08, "With Adreno 830"), {which} table: "qwen2 1.5B Q8_0 | 1.53 GiB | 1.54 B | OpenCL | 99 | {t} | {v}" '
       '(qwen2 1.5B = Qwen2/2.5-1.5B shapes)')
for which, t, v in [('*master*','pp512',46.33),('*master*','tg128',33.17),('*This PR*','pp512',148.54),('*This PR*','tg128',33.16)]:
    n = int(t[2:]); ph = 'prefill' if t.startswith('pp') else 'decode'
    add('llamacpp-16469', src.format(which=which, t=t, v=v), 'snapdragon-8-elite-qrd','llama.cpp','qwen2.5-1.5b','gpu',ph,v,
        quantity=f'llama-bench {t} (OpenCL, Q8_0, {which.strip("*")})', idx=f'qwen2.5-1.5b-q8_0-16469-{"master" if "master" in which else "pr"}.{t}',
        tokens=n if ph=='prefill' else n//2, dtype='int8', activation_dtype='fp16')
src = ('ggml-org/llama.cpp PR #15732 (comment by rmatif, 2025-09-21, "QUALCOMM Adreno(TM) 830"): "llama 1B Q8_0 | 1.22 GiB | 1.24 B | OpenCL | 99 | {fa} | {t} | {v}" '
       '(llama 1B, 1.24 B params = Llama 3.2 1B)')
for fa, t, v in [(0,'pp512',58.38),(0,'tg128',38.80),(1,'pp512',47.74),(1,'tg128',34.16)]:
    n = int(t[2:]); ph = 'prefill' if t.startswith('pp') else 'decode'
    add('llamacpp-15732', src.format(fa=fa, t=t, v=v), 'snapdragon-8-elite-qrd','llama.cpp','llama-3.2-1b','gpu',ph,v,
        quantity=f'llama-bench {t} (OpenCL, Q8_0, fa={fa})', idx=f'llama-3.2-1b-q8_0-fa{fa}.{t}',
        tokens=n if ph=='prefill' else n//2, dtype='int8', activation_dtype='fp16')
src = ('ggml-org/llama.cpp PR #14987 (rmatif, description 2025-07-31, "Results on Adreno 830"): "llama 1B F16 | 2.30 GiB | 1.24 B | OpenCL | 99 | {fa} | {t} | {v}" '
       '(llama 1B, 1.24 B params = Llama 3.2 1B)')
for fa, t, v in [(0,'pp512',198.69),(0,'tg128',21.88),(1,'pp512',274.75),(1,'tg128',21.58)]:
    n = int(t[2:]); ph = 'prefill' if t.startswith('pp') else 'decode'
    add('llamacpp-14987', src.format(fa=fa, t=t, v=v), 'snapdragon-8-elite-qrd','llama.cpp','llama-3.2-1b','gpu',ph,v,
        quantity=f'llama-bench {t} (OpenCL, F16, fa={fa})', idx=f'llama-3.2-1b-f16-fa{fa}.{t}',
        tokens=n if ph=='prefill' else n//2, dtype='fp16', activation_dtype='fp16')

# ---- MNN CPU and QNN on the Xiaomi 17 (issue #4378, beside the Honor Magic7 rows ondevice_public.yaml holds) ----------
src = ('github.com/alibaba/MNN/issues/4378 (description, 2026-04-16): "XiaoMi 17 SM8850 / cpu：prefill speed = 185.55 tok/s, decode speed = 36.00 tok/s / '
       'qnn: prefill speed = 49.83 tok/s, decode speed = 18.01 tok/s" (Qwen3-1.7B-MNN, llm_demo; prompt length not stated: 128 assumed as for the Magic7 rows)')
for unit, ph, v, act in [('cpu','prefill',185.55,'int8'),('cpu','decode',36.00,'int8'),('npu','prefill',49.83,'fp16'),('npu','decode',18.01,'fp16')]:
    add('mnn-4378', src, 'xiaomi-17','mnn','qwen3-1.7b',unit,ph,v, quantity=f'{"QNN (NPU)" if unit=="npu" else "CPU"} {ph} speed (llm_demo)',
        idx=f'qwen3-1.7b.{ph}', tokens=128 if ph=='prefill' else 256, dtype='int4', activation_dtype=act)


# ---- pocketpal #702: the Q6_K row of the Qwen3 1.7B table (int6 weights) ------------------------------------------
src = ('github.com/a-ghorbani/pocketpal-ai/pull/702 (comment 2026-04-28, "First Adreno A8X baseline - POCO Myron (Snapdragon 8 Elite Gen 5 / Adreno 840v2)"), '
       'table "Qwen3 1.7B", row q6_k: {col} {v} (llama.rn = llama.cpp; prompt length not given in this comment; the runner of that date benched pp=512 tg=128 (DEFAULT_BENCH at pocketpal-ai 789d7d9a), which the probe takes (tg: context 64))')
for unit, col, v, ph in [('cpu','CPU pp',70.9,'prefill'),('cpu','CPU tg',22.8,'decode'),('gpu','GPU pp',407.8,'prefill'),('gpu','GPU tg',23.0,'decode')]:
    add('pocketpal-702', src.format(col=col, v=v), 'poco-myron','llama.cpp','qwen3-1.7b',unit,ph,v,
        quantity=f'{col} (Qwen3 1.7B q6_k)', idx=f'qwen3-1.7b-q6_k.{"pp" if ph=="prefill" else "tg"}',
        tokens=(512 if ph=='prefill' else 64) if unit=='cpu' else (256 if ph=='prefill' else 32), dtype='int6',
        activation_dtype='int8' if unit=='cpu' else 'fp16', **(CPU_702 if unit=='cpu' else {}))

# ---- pocketpal #740: the PR-713 (baseline llama.rn) columns of the same representative-cell table ---------------------
src713 = ('github.com/a-ghorbani/pocketpal-ai/pull/740 (comment 2026-05-24), "focused" representative-cell table (qwen3-1.7b/q4_0, pp=256 tg=64), '
          'row "{d} | {b}": {col} PR-713 {v} (the baseline build the PR compares against)')
for d, dev, b, unit, pp, tg in [('poco-myron','poco-myron','cpu','cpu',204.8,37.5),('poco-myron','poco-myron','gpu','gpu',586.7,28.7),
                                ('poco-myron','poco-myron','hexagon','npu',330.0,30.6),('samsung-s23','galaxy-s23','cpu','cpu',103.9,17.2),
                                ('samsung-s23','galaxy-s23','gpu','gpu',245.6,12.1),('samsung-s23','galaxy-s23','hexagon','npu',242.4,20.4)]:
    for ph, col, v in [('prefill','pp',pp),('decode','tg',tg)]:
        extra = dict(chunk=256) if unit == 'npu' and ph == 'prefill' else CPU_LATER if unit == 'cpu' else {}
        add('pocketpal-740-base', src713.format(d=d, b=b, col=col, v=v), dev,'llama.cpp','qwen3-1.7b',unit,ph,v,
            quantity=f'llama.rn {col} (Qwen3 1.7B q4_0, {b}, PR-713 baseline)', idx=f'qwen3-1.7b-q4_0-713.{col}',
            tokens=256 if ph=='prefill' else 32, dtype='int4', activation_dtype='fp16' if unit=='gpu' else 'int8', **extra)

# ---- ExecuTorch Vulkan (GPU) on the Galaxy S24 -------------------------------------------------------------------
src = ('pytorch/executorch docs/source/backends/vulkan/tutorials/etvk-llama-tutorial.md (mirror HEAD cff6f4dd32): "sample output captured from a Galaxy S24", '
       'Llama3.2-1B-Instruct, QUANT=8da4w, GROUP_SIZE=64, --vulkan-force-fp16: "Prompt Tokens: 14", "{what}"')
add('executorch-vulkan-tutorial', src.format(what='Prompt evaluation: 0.164000 (seconds) Rate: 85.365854 (tokens/second)'), 'galaxy-s24','executorch','llama-3.2-1b','gpu','prefill',85.365854,
    quantity='Vulkan prefill throughput, 14-token prompt', idx='llama-3.2-1b-vulkan.prefill-14', tokens=14, dtype='int4', group_size=64, activation_dtype='fp16', gpu_kernels='tiled')
add('executorch-vulkan-tutorial', src.format(what='Generated 54 tokens: 1.025000 (seconds) Rate: 52.682927 (tokens/second)'), 'galaxy-s24','executorch','llama-3.2-1b','gpu','decode',52.682927,
    quantity='Vulkan decode throughput, 54 tokens after 14 (context 41 taken)', idx='llama-3.2-1b-vulkan.decode-54', tokens=41, dtype='int4', group_size=64, activation_dtype='fp16', gpu_kernels='tiled')
src = ('pytorch/executorch .wiki/backends/vulkan/overview.md (mirror HEAD cff6f4dd32), "Performance Characteristics": "LLM performance on Samsung Galaxy S24: ~260 tok/s prefill, '
       '~34 tok/s decode with quantized Llama 3.2 1B [Source: #12920]" (approximate as printed; quantisation and lengths not given: 8da4w g64 and 128 tokens assumed, as the Vulkan tutorial)')
add('executorch-vulkan-wiki', src, 'galaxy-s24','executorch','llama-3.2-1b','gpu','prefill',260.0, quantity='Vulkan prefill throughput (~)', idx='llama-3.2-1b-vulkan-wiki.prefill',
    tokens=128, dtype='int4', group_size=64, activation_dtype='fp16', gpu_kernels='tiled')
add('executorch-vulkan-wiki', src, 'galaxy-s24','executorch','llama-3.2-1b','gpu','decode',34.0, quantity='Vulkan decode throughput (~)', idx='llama-3.2-1b-vulkan-wiki.decode',
    tokens=128, dtype='int4', group_size=64, activation_dtype='fp16', gpu_kernels='tiled')

# ---- ExecuTorch QNN hybrid mode (draft PR #7569) -----------------------------------------------------------------
add('executorch-7569', 'github.com/pytorch/executorch/pull/7569 (description, 2025-01-09): "Inference Speed: Achieve ~60tok/sec using hybrid mode on SM8650 with QNN 2.28" '
    '("This PTE is generated with QNN 2.28, prefill=32, kv=512, ptq=16a4w, mode=hybrid"; Llama 3.2 (1B: the 1.1 GB PTE); SM8650 device not named; approximate as printed)',
    'snapdragon-8-gen3-device','executorch','llama-3.2-1b','npu','decode',60.0, quantity='ExecuTorch QNN hybrid-mode token rate (~), kv 512',
    idx='llama-3.2-1b-hybrid.decode', tokens=512, dtype='int4', activation_dtype='fp16')

# ---- ExecuTorch XNNPACK, an earlier README revision (OnePlus 12, BF16) ------------------------------------------------
src = ('pytorch/executorch examples/models/llama2/README.md (revision e172c5ce35, 2024-09-26): "Llama 3.2 1B and 3B performance was measured on the OnePlus 12 device ... for generating 128 tokens", '
       'row "{m} | {d} tokens/second | {p} tokens/second" (decode | prefill; the BF16 models, the only 1B/3B export of that revision; prompt length not given: 128 assumed)')
for m, model, dec, pre in [('1B','llama-3.2-1b',19.4,53.41),('3B','llama-3.2-3b',7.76,22.98)]:
    s = src.format(m=m, d=dec, p=pre)
    add('executorch-llama-readme-2024-09', s, 'oneplus-12','executorch',model,'cpu','prefill',pre, quantity=f'BF16 prefill ({m}, Sept 2024 README)', idx=f'{model}-bf16-2024-09.prefill',
        tokens=128, dtype='bf16', activation_dtype='bf16')
    add('executorch-llama-readme-2024-09', s, 'oneplus-12','executorch',model,'cpu','decode',dec, quantity=f'BF16 decode ({m}, Sept 2024 README)', idx=f'{model}-bf16-2024-09.decode',
        tokens=128, dtype='bf16', activation_dtype='bf16')


# ---- QNN Genie on the realme GT 8 Pro (AI Hub app issue) ------------------------------------------------------------
add('aihub-apps-150', 'github.com/qualcomm/ai-hub-apps/issues/150 (description, 2026-05-19): llama_v3_2_3b_instruct exported with --device "Snapdragon 8 Elite Gen 5 QRD", '
    'run on a realme GT8 Pro (Snapdragon 8 Elite Gen 5): "Run the genie-t2t-run with --profile parameter, and got ~30 tokens/s" (approximate as printed; w4a16 and the 4096-token '
    'context of the AI Hub export assumed)', 'realme-gt8-pro','qnn','llama-3.2-3b','npu','decode',30.0, quantity='Genie (genie-t2t-run) token rate (~)',
    idx='llama-3.2-3b-genie.decode', tokens=4096, dtype='int4', activation_dtype='fp16')


# ---- QNN: 2024 revisions of the AI Hub perf.yaml (per-graph latencies; context 1024, a single 1024-token prompt graph) ----
src = ('Qualcomm AI Hub Models (github.com/quic/ai-hub-models), qai_hub_models/models/{m}/perf.yaml at commit {c} ({d}): {dev}, torchscript_onnx_qnn, '
       'precision uint16 (w4a16): {graph} inference_time {us} us (info.yaml of that revision: "Max context length: 1024", "Prompt processor input: 1024 tokens")')
for m, model, c, d, dev_name, dev, tg_us, pp_us in [
        ('llama_v2_7b_chat_quantized','llama-2-7b','03ff7b80','2024-02-23','Samsung Galaxy S23 Ultra','galaxy-s23-ultra',117812,2578521),
        ('llama_v2_7b_chat_quantized','llama-2-7b','c5469651','2024-05-28','Samsung Galaxy S24','galaxy-s24',104953,1917811),
        ('llama_v2_7b_chat_quantized','llama-2-7b','357d57dd','2024-09-10','Samsung Galaxy S24','galaxy-s24',88438,1484949),
        ('llama_v3_8b_chat_quantized','llama-3-8b','bb0ca2e3','2024-07-16','Samsung Galaxy S24','galaxy-s24',72856,1316502)]:
    tg = 'Llama2-TokenGenerator-KVCache-Quantized' if c == '357d57dd' else ('Llama3-TokenGenerator-KVCache-Quantized' if 'v3' in m else 'Llama-TokenGenerator-KVCache-Quantized')
    pp = tg.replace('TokenGenerator-KVCache', 'PromptProcessor')
    add('aihub-perf-yaml-2024', src.format(m=m, c=c, d=d, dev=dev_name, graph=tg, us=tg_us), dev,'qnn',model,'npu','decode',tg_us/1000, metric='ms',
        quantity=f'{tg} latency per token (1024-token context)', idx=f'{m}-{c}.decode', tokens=1024, dtype='int4', activation_dtype='fp16')
    add('aihub-perf-yaml-2024', src.format(m=m, c=c, d=d, dev=dev_name, graph=pp, us=pp_us), dev,'qnn',model,'npu','prefill',pp_us/1000, metric='ms',
        quantity=f'{pp} latency, one 1024-token pass', idx=f'{m}-{c}.prefill-1024', tokens=1024, chunk=1024, dtype='int4', activation_dtype='fp16')


# ---- MLC-LLM OpenCL decode on a Snapdragon 8 Gen 3 phone (TVM PR adding the Adreno GEMV schedule) -----------------------
src = ('github.com/apache/tvm/pull/16932 (description): "Enabled new gemv schedule for opencl target, which effectively improves decode performance of mlc-llm LLM models with '
       'q4f16_0 format. Few LLM models Decode performance on Snapdragon Gen-3 android. Models Baseline Latest improved / Llama-2-7B 10 tok/sec 12.5 tok/sec" '
       '(device not named; context not given: 128 assumed as for the Xiaomi 14 point of ondevice_public.yaml)')
for which, v in [('baseline', 10.0), ('improved', 12.5)]:
    add('tvm-16932', src, 'snapdragon-8-gen3-device','mlc','llama-2-7b','gpu','decode',v, quantity=f'MLC decode throughput, q4f16_0 ({which} GEMV schedule)',
        idx=f'llama-2-7b-{which}.decode', tokens=128, dtype='int4', activation_dtype='fp16', gpu_kernels='q4f16_0')


# ---- llama.cpp CPU on a Snapdragon 865 phone (termux-llamacpp's published run) ----------------------------------------
src = ('pypi.org/project/termux-llamacpp (1.2.0), "Key Highlights & Real-Device Benchmarks": "Tested on Samsung Galaxy S20+ 5G (Snapdragon 865 ...) running Termux", '
       'Meta Llama 3.2 3B Instruct (Q4_K_M): "{what}" (Q4_K_M keeps v_proj and ffn_down in Q6_K, as mllm\'s Q4_K files)')
add('termux-llamacpp', src.format(what='Prompt Processing Speed 16.19 tokens / sec (61.77 ms / token) 38 tokens evaluated in 2.34s'), 'galaxy-s20-plus','llama.cpp','llama-3.2-3b','cpu','prefill',16.19,
    quantity='llama.cpp CPU prompt processing, 38 tokens', idx='llama-3.2-3b-q4_k_m.prefill-38', tokens=38, dtype='int4', activation_dtype='int8', linear_dtypes={'v_proj': 'int6', 'ffn_down': 'int6'})
add('termux-llamacpp', src.format(what='Token Generation Speed 10.23 tokens / sec (97.75 ms / token)'), 'galaxy-s20-plus','llama.cpp','llama-3.2-3b','cpu','decode',10.23,
    quantity='llama.cpp CPU token generation (context not given: 64 assumed)', idx='llama-3.2-3b-q4_k_m.decode', tokens=64, dtype='int4', activation_dtype='int8', linear_dtypes={'v_proj': 'int6', 'ffn_down': 'int6'})


# ---- ExecuTorch QNN static LLMs on SM8750 (PR #13544) --------------------------------------------------------------
src = ('github.com/pytorch/executorch/pull/13544 (description, 2025-08-20), "Statistics on SM8750, seq_len=1024" (--ptq 16a8w, --model_mode kv): "{row}" '
       '(SM8750 device not named: the 8 Elite QRD profile stands for the SoC; approximate as printed{extra})')
for row, model, v, idx, extra in [('qwen2 1.5B: ~34tok/sec', 'qwen2.5-1.5b', 34.0, 'qwen2.5-1.5b-kv1024.decode', '; qwen2 1.5B = Qwen2.5-1.5B shapes'),
                                  ('qwen3 1.7B: ~14tok/sec', 'qwen3-1.7b', 14.0, 'qwen3-1.7b-kv1024.decode', '')]:
    add('executorch-13544', src.format(row=row, extra=extra), 'snapdragon-8-elite-qrd','executorch',model,'npu','decode',v,
        quantity='ExecuTorch QNN kv-mode token rate (~), seq_len 1024', idx=idx, tokens=1024, dtype='int8', activation_dtype='fp16')

# ---- the points already in the registry (ondevice_public.yaml), by probe --------------------------------------
def probe_key(pr): return tuple(sorted((k, str(v)) for k, v in pr.items() if k != 'impl'))
PUBLIC = {}
for q in yaml.safe_load(open('experiments/published/ondevice_public.yaml'))['points']:
    pr = dict(q['probe']); pr.setdefault('engine', 'mllm'); pr.setdefault('metric', 'tokens_per_s')
    PUBLIC[probe_key(pr)] = (q['id'], q['role'])

# ---- roles by the rule (docs/ondevice_data.md) -------------------------------------------------------
groups = collections.defaultdict(list)
for i, p in enumerate(P):
    groups[(p['probe']['engine'], p['probe']['unit'])].append(i)
role = ['validation'] * len(P)
fitted = [None] * len(P)
# The GPU family of the transfer set's GPU phones that are not Adreno (their device profiles' compute.gpu.family).
GPU_FAMILY = {'pixel-8-pro': 'mali'}
for (eng, unit), idxs in groups.items():
    if len(idxs) < 4: continue
    by_src = collections.defaultdict(list)
    for i in idxs: by_src[P[i]['key']].append(i)
    def src_rank(k):
        return (-len(by_src[k]), min(SOC_YEAR[P[i]['probe']['device']] for i in by_src[k]), k)
    best = sorted(by_src, key=src_rank)[0]
    by_dev = collections.defaultdict(list)
    for i in by_src[best]: by_dev[P[i]['probe']['device']].append(i)
    dev = sorted(by_dev, key=lambda d: (-len(by_dev[d]), SOC_YEAR[d], d))[0]
    for phase in ('prefill', 'decode'):
        cand = [i for i in by_dev[dev] if P[i]['probe']['phase'] == phase]
        if not cand: continue
        # amendment 5b (docs/ondevice_data.md): pass over a candidate whose probe is a point of ondevice_public.yaml
        cand = [i for i in cand if probe_key(P[i]['probe']) not in PUBLIC]
        if not cand: continue
        c = sorted(cand, key=lambda i: (MODEL_B[P[i]['probe']['model']], P[i]['probe']['tokens'], i))[0]
        role[c] = 'calibration'
        pr = P[c]['probe']
        if unit == 'npu':
            if eng in HVX_ENGINES:   # runtimes whose NPU phases run on the HVX units (configs/engines: npu.*_backend: hvx)
                fitted[c] = 'engine.npu.hvx_gemm_efficiency' if phase == 'prefill' else 'engine.npu.hvx_bandwidth_efficiency'
            else:
                fitted[c] = 'engine.npu.max_utilization' if phase == 'prefill' else 'engine.npu.decode_bandwidth_efficiency'
            if pr.get('runtime'): fitted[c] = fitted[c].replace('engine.', f'engine.runtimes.{pr["runtime"]}.', 1)   # that runtime path's value
        else:
            fitted[c] = f'engine.{unit}.prefill_efficiency.{pr["dtype"]}' if phase == 'prefill' else f'engine.{unit}.bandwidth_efficiency'
            if pr.get('cpu_kernels'):   # a class relative to another (engine kernel_classes relative_to) fits its base's value
                base = CPU_CLASS_BASE.get((eng, pr['cpu_kernels']), pr['cpu_kernels'])
                fitted[c] = fitted[c].replace('engine.cpu.prefill_efficiency.', f'engine.cpu.kernel_classes.{base}.prefill_efficiency.')
            if unit == 'gpu':   # GPU kernel values are per GPU family (engine gpu.families, docs/gpu_sources.md)
                fitted[c] = fitted[c].replace('engine.gpu.', f'engine.gpu.families.{GPU_FAMILY.get(pr["device"], "adreno")}.')
                if phase == 'prefill' and pr.get('gpu_kernels'):   # a family's prefill efficiencies per kernel class
                    fitted[c] = fitted[c].replace('.prefill_efficiency.', f'.kernel_classes.{pr["gpu_kernels"]}.prefill_efficiency.')
            if phase == 'decode' and eng == 'executorch': fitted[c] += '.' + pr['dtype']   # executorch keys its bandwidth per weight dtype

# A validation point whose probe is a calibration point's reads the very value that point is fitted to (another
# measurement of the same configuration): the registry counts it as derived (derived_from, in no median).
cal_by_probe = {probe_key(P[i]['probe']): i for i in range(len(P)) if role[i] == 'calibration'}
# Causes (README rule: a validation point more than 25% off carries a one-line cause), by what the model omits
# for its engine x unit x phase; attached only where today's residual exceeds 25% (residuals read from a
# `mobisim ondevice` report given as the second argument). Classified by what they say: all are model gaps (mechanism).
CAUSES = {
    ('llama.cpp', 'cpu', 'prefill'): "llama.cpp's repack kernel class (PR #713/#722/#740 runs: CPU_REPACK buffer, 6 threads) is the vec_dot class fitted on PR #702's non-repacked run times pocketpal-ai PR #637's in-app Pixel 9 ratio (Q4_0 1.71x, Q8_0 1.90x; desktop llama-bench gives 3.5x, PR #18096); the same cell measured 205-302 tok/s across llama.rn 0.12.0-rc.9/0.12.0/0.12.3, and those runs also turned CPU flash attention on and settled 30 s between cells (PR #702: off, back to back), which no parameter separates (per-point causes for the S23, Q6_K and S20+ points: experiments/published/ondevice_transfer.yaml)",
    ('llama.cpp', 'cpu', 'decode'): "llama.cpp CPU decode streams at one share of DRAM bandwidth fitted on PR #702's Q4_0 run (repacking leaves tg unchanged, PR #637); Q8_0 GEMVs read twice the bytes at that share, but the published Q8_0 rates are close to Q4_0's (Q4_0 decode is not bandwidth-bound there), and the Galaxy S23's and S20+'s memory shares differ from the POCO's",
    ('llama.cpp', 'gpu', 'prefill'): "llama.cpp OpenCL prefill runs two Adreno kernel classes fitted on one build each (the noshuffle Q4_0 GEMM on the Redmi K70's 2025 build; the generic l4_lm GEMM of Q8_0/F16/Q6_K on PR #18871's master, which PR #16469's and the 8 Elite's 2025 F16 runs match within 26%); builds before PR #16469 ran Q8_0 without that GEMM (3-4x slower), and later builds add Adreno-specific Q8_0 (PR #18871), xmem F16 (PR #22755) and faster Q4_0 GEMMs (3-7x faster), which no per-SoC parameter captures",
    ('llama.cpp', 'gpu', 'decode'): "llama.cpp OpenCL decode streams at one share of DRAM bandwidth fitted on a Q8_0 GEMV (PR #18871, 8 Elite Gen 5); the Q4_0 noshuffle and Q6_K GEMVs reach other shares (Q8_0 as fast as Q4_0 in tok/s on the POCO: not bandwidth-bound), the Galaxy S23's app builds are slower still, and the 8 Elite's 2025 builds decode faster than the fit",
    ('llama.cpp', 'npu', 'prefill'): "llama.cpp's Hexagon prefill runs op by op on the HVX units (devices/npu.h) with one matmul efficiency fitted on a PR-740 build (2026-05); older builds ran slower HVX kernels (PR #740's own table: 330 -> 720 tok/s on the same phone, the README's build is older still), and every SoC's HVX peak is one derivation (no per-SoC cDSP clock or context count is published)",
    ('llama.cpp', 'npu', 'decode'): "llama.cpp's Hexagon decode streams weights at one share of DRAM bandwidth fitted on the 8 Gen 2 (per-op dispatch folded in, hvx_op_overhead_us 0); a 1B model has as many ops per token as a 1.7B one but fewer bytes, so the dispatch share the fit folds in differs per model",
    ('mnn', 'cpu', 'prefill'): "MNN's int8 GEMM share of the ISA peak (4 threads) is the geometric mean of two calibration fits (Honor Magic7 2025 build, Xiaomi 12 2023 build; 9% apart with Oryon's 2 SMMLA per cycle, LLVM AArch64SchedOryon.td); the iPhones' peaks rest on estimated Apple pipe counts, SMMLA rates and clocks, the 8 Elite Gen 5's Oryon gen 3 on gen 1's scheduling model, and small models (0.5B) carry per-op costs the share does not",
    ('mnn', 'cpu', 'decode'): "MNN CPU decode streams at one share of DRAM bandwidth (mean of the Honor Magic7 and Xiaomi 12 fits); Apple's memory system and 8-bit weights (dequantised on the fly) give another share",
    ('mnn', 'npu', 'decode'): "MNN's QNN graphs hold the default (asymmetric) export's weights as fp16 (configs/engines/mnn.yaml npu.graph_weight_dtype, from QNNConvolution.cpp), which the prediction now streams; what is left is the NPU's share of DRAM bandwidth, which no MNN NPU point calibrates (the device's mllm-fitted 1.0 is used), and the online QNN mode's CPU fallbacks of ops the QNN backend does not register",
    ('mllm', 'npu', 'prefill'): "mllm v1's public NPU prefill splits every layer into two QNN sub-graphs with the attention (QwenQKVmm) and the shadow outlier linears on the CPU between them, run one after the other in the demos (no QNNPipelineExecutor overlap), and builds and finalises the graphs at run time (issue #116: graph building dominates); mobisim charges the NPU graphs' execution only",
    ('executorch', 'cpu', 'decode'): "measured in the demo app (the README's ** workflow): the app's token loop, JNI and UI costs, which the adb-binary measurements (and the fitted bandwidth) exclude",
    ('executorch', 'npu', 'decode'): "one QNN decode bandwidth share fitted on Qwen2.5-1.5B (SM8750, PR #13544); ExecuTorch's static-llama KV-cache I/O on the CPU (issue #7614) and graph-split costs scale with layers and context rather than with weight bytes, and the 2024 builds (#7411) were slower still",
    ('executorch', 'gpu', 'prefill'): "ExecuTorch Vulkan prefill has one value fitted on the tutorial's 14-token prompt (fixed costs dominate it); the wiki's longer prompts on another build run 3x faster per token",
    ('qnn', 'npu', 'prefill'): "the 128-token TTFT is one prompt-processor pass plus launch and graph-switch costs the utilisation curve (calibrated at 4096 tokens) does not separate; on the 8 Elite Gen 5 QRD the profile inherits the 8 Elite's NPU peak (Qualcomm publishes none)",
    ('qnn', 'npu', 'decode'): "the Gen 5 QRD profile inherits the 8 Elite's NPU and memory numbers (no published peaks); decode streams the weights at the 8 Elite's fitted bandwidth share",
    ('executorch', 'gpu', 'decode'): "the wiki's Vulkan decode is another build and export (the tutorial's --vulkan-force-fp16 run calibrates): one fitted bandwidth share per runtime",
    ('mlc', 'gpu', 'decode'): "the Pixel 8 Pro profile inherits the Pixel 7's 51.2 GB/s (Google publishes no LPDDR5X speed); MLC's Mali bandwidth share is fitted on the 1.5B distill's decode step, and the 3B model's longer step is not proportionally longer",
}
# Causes of single points whose own evidence says more than their engine x unit x phase's cause (same rule: attached
# only where today's residual exceeds 25%), with their kind: `workload` where the measurement's timed region holds
# work the probe does not model (a first-run graph compilation), by what the cause says.
CAUSE_BY_ID = {
    'ondevice.snapdragon-8-gen3-device.executorch.llama-3.2-3b.decode.npu': ('mechanism', "another ExecuTorch graph than the one modelled: the maintainers' reply in the same thread (cccclai, 2025-01-03) puts the gap on the generic model definition the run exported, \"the model definition in `llama_transformer.py` isn't ideal for running llama model on qnn backend. We've started a new model definition in ... examples/qualcomm/oss_scripts/llama3_2 which have better latency number\"; the engine's NPU path is that static llama (per-head attention, KV cache as graph I/O), whose decode bandwidth share is fitted on Qwen2.5-1.5B (PR #13544); export_llama's QNN graph of 2024 is not modelled"),
    'ondevice.iphone-14-pro.mnn.qwen-1.8b-chat-4bit.prefill.cpu': ('mechanism', "MNN 2.8.0's ConvolutionHybrid splits each linear's output channels equally over its 4 threads, and iOS runs 2 of them on the A16's E-cores (2 threads more than the 2 P-cores; Apple's CPU Optimization Guide 3.0, sections 5.1-5.3: static partitions and spin-waits leave that work on the E-cores), so each op ends with an E-core's quarter (engine class hybrid): 4 x 2.02 GHz (estimated) x 2 SIMD units (Apple's guide) on SDOT (the tag's iOS detection sets no i8mm, probe cpu_isa_detected) at MNN's share fitted on Android SoCs. The published rate is 2.8x that: not reachable on the E-cores' documented units at that clock unless the prebuilt package ran SMMLA (its own detection code was not read, only the 2.8.0 tag's) or iOS moved the lagging threads to the P-cores; neither is documented for this run (docs/cpu_isa_sources.md, \"Where MNN's threads run on an iPhone\")"),
    'ondevice.iphone-14-pro.mnn.qwen-1.8b-chat-8bit.prefill.cpu': ('mechanism', "MNN 2.8.0's ConvolutionHybrid splits each linear's output channels equally over its 4 threads, and iOS runs 2 of them on the A16's E-cores (2 threads more than the 2 P-cores; Apple's CPU Optimization Guide 3.0, sections 5.1-5.3: static partitions and spin-waits leave that work on the E-cores), so each op ends with an E-core's quarter (engine class hybrid): 4 x 2.02 GHz (estimated) x 2 SIMD units (Apple's guide) on SDOT (the tag's iOS detection sets no i8mm, probe cpu_isa_detected) at MNN's share fitted on Android SoCs. The published rate is 2.8x that: not reachable on the E-cores' documented units at that clock unless the prebuilt package ran SMMLA (its own detection code was not read, only the 2.8.0 tag's) or iOS moved the lagging threads to the P-cores; neither is documented for this run (docs/cpu_isa_sources.md, \"Where MNN's threads run on an iPhone\")"),
    'ondevice.xiaomi-17.mnn.qwen3-1.7b.prefill.npu': ('mechanism', "the graph build is one finalise cost per linear layer from a Snapdragon 8 Gen 2 phone's profile of a one-matmul graph (22.085 ms, of which 16.89 ms host work, configs/engines/mnn.yaml), the host share scaled by prime-core clock only (3.2 GHz Cortex-X3 -> 4.6 GHz Oryon v3: 16.94 ms per linear, 3.32 s for 196 linears; devices/npu.h); this SM8850 phone spent 2.6 s on the prompt (at the 128 tokens assumed) against the SM8750 Magic7's 3.6 s under the same build and export (3.5 s and 3.7 s predicted), so its host finalises faster than its clock says: the model assumes the same work per clock on Cortex-X3 and Oryon, while single-core benchmarks give the 8 Elite Gen 5 about 1.3x the X3's work per clock (Geekbench 6: about 3,830 at 4.6 GHz against about 2,100 at 3.36 GHz), a per-core speed no device profile carries (docs/npu_sources.md)"),
    'ondevice.oneplus-12.mllm.qwen1.5-1.8b.prefill-1022.npu': ('workload', "the demo's timer (quoted in issue #206) starts before the chunk loop whose first chunk builds and finalises the QNN graphs at run time (Module::isFirstChunk; the maintainers in issue #116: building the graph takes most of the time); 9.6 of the 10 s are not graph execution at the rate mobisim's curve gives (0.36 s). Also serial: the attention and shadow linears run on the CPU between each layer's two QNN sub-graphs, without the paper's overlap"),
    'ondevice.snapdragon-8-elite-qrd.executorch.qwen3-1.7b-kv1024.decode.npu': ('mechanism', 'the same PR\'s table gives Qwen3-0.6B ~56 tok/s and Qwen3-1.7B ~14 on the same SoC and settings: both have 28 layers and the same KV shape (8 KV heads x 128), so the 4x between them is not in costs per layer or per KV byte, and 14 tok/s is below what the 1.7B\'s bytes at Qwen2.5-1.5B\'s fitted share give (29 tok/s); the PR\'s example command gives no --num_sharding, and Qualcomm\'s engineers say sharding (--num_sharding) has the largest effect on static-llama speed (issue #7614: HTP execution longer than the RPC polling time); not modelled (no point separates it). The next Qualcomm PR (#13755, d6864726a9) switched this model to 16a4w block-16 because "16a8w ... is much slower" and measured 37 tok/s, which the model predicts at 44.8 (+21.1%, a point of ondevice_cells.yaml; its 4-bit block scales costed in the 8-bit storage the export writes): the slowness is specific to this model\'s 16a8w export'),
}
RESID = {}
if len(sys.argv) > 2:
    for line in open(sys.argv[2]):
        f = line.split()
        if len(f) > 4 and f[0].startswith('ondevice.') and f[4].endswith('%'):
            RESID[f[0]] = float(f[4].rstrip('%').replace('+', '')) / 100
out = []
for i, p in enumerate(P):
    pr = p['probe']
    pid = f"ondevice.{pr['device']}.{pr['engine']}.{p['idx']}.{pr['unit']}" if p['idx'] else None
    e = {'id': pid, 'source': p['source'], 'quantity': p['quantity'], 'published': p['published'], 'unit': p['unit'], 'role': role[i], 'probe': pr}
    if fitted[i]: e['fitted'] = [fitted[i]]
    if role[i] == 'validation' and abs(RESID.get(pid, 0)) > 0.25 and (pid in CAUSE_BY_ID or (pr['engine'], pr['unit'], pr['phase']) in CAUSES):
        e['cause_kind'], e['cause'] = CAUSE_BY_ID.get(pid) or ('mechanism', CAUSES[(pr['engine'], pr['unit'], pr['phase'])])
        if pr['engine'] == 'qnn' and p['key'] == 'aihub-perf-yaml-2024':
            e['cause'] = ("a 2024 AI Hub export (one 1024-token prompt graph, the QNN SDK of early/mid 2024) on an 8 Gen 2 / 8 Gen 3 HTP; the QNN "
                          "utilisation and decode bandwidth share were calibrated on 2025 Genie exports (128-token graphs) on the 8 Elite, and mobisim "
                          "carries one runtime efficiency across SDK releases and HTP generations")
    if role[i] == 'validation' and probe_key(pr) in cal_by_probe: e['derived_from'] = [None]; e['_cal'] = cal_by_probe[probe_key(pr)]
    if role[i] == 'validation' and PUBLIC.get(probe_key(pr), ('', ''))[1] == 'calibration': e['derived_from'] = [PUBLIC[probe_key(pr)][0]]
    out.append(e)
for e in out:
    if '_cal' in e: e['derived_from'] = [out[e.pop('_cal')]['id']]

ids = [e['id'] for e in out]; assert len(ids) == len(set(ids)), [x for x in ids if ids.count(x) > 1]

class Flow(dict): pass
def flow_rep(d, data): return d.represent_mapping('tag:yaml.org,2002:map', data.items(), flow_style=True)
yaml.add_representer(Flow, flow_rep)
for e in out: e['probe'] = Flow(e['probe'])
head = ("# Public on-device measurements that no mobisim parameter was fitted on (issue 37, item 3), beside mobisim's prediction.\n"
        "# Same schema as ondevice_public.yaml. Roles follow the rule of docs/ondevice_data.md (committed before any of these\n"
        "# points was evaluated); the calibration points are NOT refitted yet: today they are scored with the committed profiles.\n"
        "# Generated from the collected citations; every `published` value is printed in its source as quoted.\n")
doc = {'document': 'public on-device measurements for transfer (issue 37): AI Hub perf.yaml, runtime READMEs, GitHub threads', 'set': 'transfer', 'external': True, 'points': out}
text = yaml.dump(doc, sort_keys=False, width=200, allow_unicode=True)
open(sys.argv[1], 'w').write(head + text)
cal = [(e['id'], e['probe']['engine'], e['fitted'][0]) for e in out if e['role'] == 'calibration']
print(len(out), 'points,', len(cal), 'calibration,', sum('derived_from' in e for e in out), 'derived')
for c in cal: print('CAL', *c)
cnt = collections.Counter((e['probe']['engine'], e['probe']['unit']) for e in out); print(dict(cnt))
print(collections.Counter(e['probe']['device'] for e in out))
