# ONE-OFF MIGRATION, ALREADY APPLIED (issue 37 item 3): do not rerun. It appended the transfer set's points to
# the calibration.yaml of its day; the entries have since been fitted and edited (the llama.cpp and MNN CPU
# `initial` values are the committed fits, docs/ondevice_data.md "CPU ISA peaks"), and a rerun on today's file
# would append every point a second time. Kept as the record of how the entries were first written.
# Rewrites experiments/published/calibration.yaml = main's version + the transfer set's calibration points
# (appended to an existing (key, profile) entry, or new entries below a comment), from ondevice_transfer.yaml.
import re, subprocess, yaml, sys
base = subprocess.run(['git', 'show', 'main:experiments/published/calibration.yaml'], capture_output=True, text=True, check=True).stdout
pts = yaml.safe_load(open('experiments/published/ondevice_transfer.yaml'))['points']
INITIAL = {  # today's effective value where the engine profile sets none (the device profile's)
    ('llama.cpp', 'engine.npu.hvx_gemm_efficiency'): (0.56075, [0.001, 1.0], "llama.cpp's Hexagon backend prefill: its HVX matmul kernels' share of each SoC's HVX peak (npu.hvx_peak_tops_int8)"),
    ('llama.cpp', 'engine.npu.hvx_bandwidth_efficiency'): (0.270394, [0.01, 1.0], "llama.cpp's Hexagon backend decode: its HVX kernels' share of DRAM bandwidth"),
    ('llama.cpp', 'engine.cpu.prefill_efficiency.int4'): (0.031, [0.001, 1.0], "llama.cpp CPU Q4_0 prefill share of the int8 peak; today the device's mllm-fitted 0.031"),
    ('llama.cpp', 'engine.cpu.kernel_classes.vec_dot.prefill_efficiency.int4'): (0.031, [0.001, 1.0], "llama.cpp CPU Q4_0 vec_dot (non-repacked) prefill share of the ISA peak; the committed value is in calibration.yaml"),
    ('llama.cpp', 'engine.cpu.bandwidth_efficiency'): (0.5, [0.01, 1.0], "llama.cpp CPU decode share of DRAM bandwidth; today the device's 0.5"),
    ('llama.cpp', 'engine.gpu.prefill_efficiency.int8'): (0.2, [0.001, 1.0], "llama.cpp OpenCL Q8_0 prefill share of the GPU fp16 peak; today the device's 0.2"),
    ('llama.cpp', 'engine.gpu.bandwidth_efficiency'): (0.6, [0.01, 1.0], "llama.cpp OpenCL decode share of DRAM bandwidth; today the device's 0.6"),
    ('mllm', 'engine.runtimes.aot.npu.max_utilization'): (0.157864, [0.001, 1.0], "mllm's QNN-AOT runtime (mllm/backends/qnn/aot_rt, full-model graphs) NPU prefill: its share of the HTP peak on long chunks (from the device profile's 0.15)"),
    ('mllm', 'engine.runtimes.aot.npu.decode_bandwidth_efficiency'): (0.322307, [0.01, 1.0], "mllm's QNN-AOT runtime NPU decode (the 1-token graph model.0.s1): its share of DRAM bandwidth"),
    ('mlc', 'engine.gpu.prefill_efficiency.int4'): (0.2, [0.001, 1.0], "MLC-LLM OpenCL q4f16 prefill share of the GPU fp16 peak; today the device's 0.2"),
    ('executorch', 'engine.npu.max_utilization'): (0.15, [0.001, 1.0], "ExecuTorch QNN backend NPU prefill; today the device's mllm curve"),
    ('executorch', 'engine.npu.decode_bandwidth_efficiency'): (0.676249, [0.01, 1.0], "ExecuTorch QNN backend NPU decode share of DRAM bandwidth"),
    ('executorch', 'engine.gpu.prefill_efficiency.int4'): (0.2, [0.001, 1.0], "ExecuTorch Vulkan 8da4w prefill share of the GPU fp16 peak; today the device's 0.2"),
    ('executorch', 'engine.gpu.bandwidth_efficiency.int4'): (0.6, [0.01, 1.0], "ExecuTorch Vulkan decode share of DRAM bandwidth; today the device's 0.6"),
    ('mnn', 'engine.npu.max_utilization'): (0.15, [0.001, 1.0], "MNN QNN backend NPU prefill"),
    ('mnn', 'engine.npu.decode_bandwidth_efficiency'): (0.5, [0.01, 1.0], "MNN QNN backend NPU decode"),
    ('mnn', 'engine.gpu.prefill_efficiency.int4'): (0.2, [0.001, 1.0], "MNN OpenCL prefill share of the GPU fp16 peak"),
    ('mnn', 'engine.gpu.bandwidth_efficiency'): (0.6, [0.01, 1.0], "MNN OpenCL decode share of DRAM bandwidth"),
}
t = base
new_entries = []
for p in pts:
    if p['role'] != 'calibration': continue
    key, prof, pid = p['fitted'][0], p['probe']['engine'], p['id']
    pat = re.compile(r'(  - key: ' + re.escape(key) + r'\n    profile: ' + re.escape(prof) + r'\n(?:    .*\n)*?    points: \[)([^\]]*)\]')
    m = pat.search(t)
    if m:
        t = t[:m.start()] + m.group(1) + m.group(2) + ', ' + pid + ']' + t[m.end():]
    else:
        ini, b, why = INITIAL[(prof, key)]
        new_entries.append(f'  - key: {key}\n    profile: {prof}\n    initial: {ini}\n    bounds: [{b[0]}, {b[1]}]\n    points: [{pid}]\n    why: "{why}"\n')
t = t.rstrip('\n') + '\n\n' + (
    "  # --- on-device transfer set (ondevice_transfer.yaml, issue 37 item 3): its calibration points, chosen by the rule of\n"
    "  # docs/ondevice_data.md (also appended to the matching entries above). NOT refitted yet: configs/engines/ is unchanged,\n"
    "  # and the keys below are not set in their engine profiles today, so `initial` is the value that applies now (the\n"
    "  # device profile's). `mobisim calibrate` (or `mobisim ondevice --fit`) would fit them.\n") + ''.join(new_entries)
open('experiments/published/calibration.yaml', 'w').write(t)
print(len(new_entries), 'new entries')
