#!/usr/bin/env bash
# Run named GPU benchmark steps on the device machine, inside one call's time.
#
#   bash bench/on_device.sh BUDGET_S STEP...   (under $OUT: STEP.json per step, all.log)
#
# Unpacks the carried .site.tar.xz (bench/pack_site.sh) or installs the carried wheels
# (.whl/) into /tmp/site first (docs/BENCHMARKS.md). Each step
# gets at most its own cap and never more than what is left of BUDGET_S, so a slow step
# cannot eat the next ones' time silently: a step that runs out is logged as "timeout".
# The 7B checkpoint is written once under artifacts/bench-decode and shared by the steps.
set -uo pipefail
budget=$1
shift
start=$SECONDS
out=${OUT:-/tmp/out}
mkdir -p "$out"
if [ -f .site.tar.xz ]; then # bench/pack_site.sh
    mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
    export PYTHONPATH=/tmp/site
elif [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
W=artifacts/bench-decode

command_for() {
    case $1 in
    vision) echo "python3 bench/bench_vision.py --arch 7b --device cuda --reps 20" ;;
    vision-padded) echo "python3 bench/bench_vision.py --arch 7b --device cuda --reps 20 --sets 1x1024x768,8x1024x768 --padded --profile" ;;
    vision-novel) echo "python3 bench/bench_vision.py --arch 7b --device cuda --sets= --novel 12" ;;
    vision-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q tests/engine/test_vision_rope.py" ;;
    vision-compiled) echo "python3 bench/bench_vision.py --arch 7b --device cuda --reps 20 --sets 1x1024x768,8x1024x768 --compiled --profile" ;;
    engine) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --workdir $W" ;;
    engine-nofuse) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --no-fuse --workdir $W" ;;
    stock) echo "python3 bench/bench_decode.py --arch 7b --skip-engine --workdir $W" ;;
    dequant) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --prefill-dequant-rows 256 --workdir $W" ;;
    graphs) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --prefill-dequant-rows 256 --prefill-graph-rows 4096 --workdir $W" ;;
    web) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --web --workdir $W" ;;
    a10) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --a10 --workdir $W" ;;
    a10-graphs) echo "python3 bench/bench_decode.py --arch 7b --skip-stock --a10 --prefill-dequant-rows 256 --prefill-graph-rows 4096 --workdir $W" ;;
    3b) echo "python3 bench/bench_decode.py --arch 3b --workdir $W" ;;
    7b-graphs) echo "python3 bench/bench_decode.py --arch 7b --prefill-dequant-rows 256 --prefill-graph-rows 4096 --workdir $W" ;;
    3b-graphs) echo "python3 bench/bench_decode.py --arch 3b --prefill-dequant-rows 256 --prefill-graph-rows 4096 --workdir $W" ;;
    qwen3) echo "python3 bench/bench_decode.py --arch 7b,qwen3-8b --prefill-dequant-rows 256 --prefill-graph-rows 4096 --workdir $W" ;;
    qwen3-8b) echo "python3 bench/bench_decode.py --arch qwen3-8b --prefill-dequant-rows 256 --prefill-graph-rows 4096 --workdir $W" ;;
    batching-compiled) echo "python3 bench/profile_batching.py --rows 1,8 --variants graph,graph-compiled,graph-compiled-bmm --compiled-rows 1,8 --steps 16 --workdir $W" ;;
    qwen3-concurrency) echo "python3 bench/bench_concurrency.py --arch qwen3-8b --users 1,8 --poisson-users , --max-images 1 --new-tokens 256 --skip-stock --workdir $W" ;;
    qwen3-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q tests/engine/test_gpu_qwen3.py" ;;
    estimate-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/admission -W default -m gpu -q -s tests/admission/test_estimate_gpu.py" ;;
    admission) echo "python3 bench/bench_admission_gpu.py --deadline-s 240 --prefill-dequant-rows 256 --workdir $W" ;;
    admission-load) echo "python3 bench/bench_admission_gpu.py --phase load --deadline-s 360 --prefill-dequant-rows 256 --workdir $W" ;;
    profile) echo "python3 bench/profile_decode.py --workdir $W" ;;
    prefill) echo "python3 bench/profile_prefill.py --workdir $W" ;;
    prefill-dequant) echo "python3 bench/profile_prefill.py --prefill-dequant-rows 256 --workdir $W" ;;
    join8) echo "python3 bench/profile_prefill.py --prefill-dequant-rows 256 --newcomers 8 --reps 2 --workdir $W" ;;
    join-profile) echo "python3 bench/profile_prefill.py --prefill-dequant-rows 256 --newcomers 1,8,16 --reps 3 --workdir $W" ;;
    # training uses the device's own packages, not the carried site folder
    train-profile) echo "env -u PYTHONPATH python3 training/profile_train.py" ;;
    batching-profile) echo "python3 bench/profile_batching.py --workdir $W" ;;
    batching-dense) echo "python3 bench/profile_batching.py --rows 1,4,8,16 --variants graph,graph-dense --workdir $W" ;;
    batching-kernels) echo "python3 bench/profile_batching.py --rows 1,8,16 --variants graph,graph-compiled --compiled-rows 1,8 --kernels 1,8,16 --kernels-compiled 1,8 --steps 16 --workdir $W" ;;
    batching-profile-short) echo "python3 bench/profile_batching.py --rows 1,8,16 --compiled-rows 1,8,16 --no-dequant --workdir $W" ;;
    concurrency) echo "python3 bench/bench_concurrency.py --users 1,8,16 --poisson-users , --max-images 1 --new-tokens 256 --skip-stock --workdir $W" ;;
    concurrency-a10) echo "python3 bench/bench_concurrency.py --a10 --users 16,32 --poisson-users , --max-images 1 --new-tokens 256 --skip-stock --workdir $W" ;;
    concurrency-batch16) echo "python3 bench/bench_concurrency.py --users 8,16 --poisson-users , --max-images 1 --new-tokens 256 --skip-stock --peer max_batch=16 --workdir $W" ;;
    concurrency-varied) echo "python3 bench/bench_concurrency.py --users 1,8,16 --poisson-users , --max-images 1 --new-tokens 256 --skip-stock --size varied --peer-no-cudnn --workdir $W" ;;
    concurrency-dense-ab) echo "python3 bench/bench_concurrency.py --users 1,8,16 --poisson-users , --max-images 1 --new-tokens 256 --skip-stock --peer dense_weight_share=0.25 --workdir $W" ;;
    patching-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q tests/engine/test_patching.py" ;;
    attention-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q tests/engine/test_decode_attention.py" ;;
    batching-attn) echo "python3 bench/profile_batching.py --rows 1,8,16 --variants graph-compiled,graph-compiled-attn --compiled-rows 1,8,16 --steps 16 --workdir $W" ;;
    batching-attn1) echo "python3 bench/profile_batching.py --rows 1 --variants graph-compiled,graph-compiled-attn --compiled-rows 1 --steps 16 --workdir $W" ;;
    batching-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q -x tests/engine/test_batching_gpu.py" ;;
    preprocess) echo "python3 bench/bench_preprocess.py" ;;
    int4-triton) echo "python3 bench/bench_int4_triton.py" ;;
    int4-tiles) echo "python3 bench/bench_int4_tiles.py" ;;
    int4-joined) echo "python3 bench/bench_int4_triton.py --blocks 64x128,128x128 --splits 2,4,8,16 --stages 3,4 --probe-rows 8,16 --keep 2" ;;
    batching-joined) echo "python3 bench/profile_batching.py --rows 8,16 --variants graph-compiled,graph-compiled-triton --compiled-rows 8,16 --steps 16 --workdir $W" ;;
    batching-triton) echo "python3 bench/profile_batching.py --rows 8,16 --variants graph,graph-compiled,graph-compiled-triton --compiled-rows 8,16 --steps 16 --workdir $W" ;;
    profile-nograph) echo "python3 bench/profile_decode.py --no-compile --workdir $W" ;;
    awq-gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q tests/engine/test_awq_cuda.py" ;;
    gputests) echo "python3 -m pytest -p no:cacheprovider --confcutdir=tests/engine -W default -m gpu -q tests/engine/test_gpu_decode.py tests/engine/test_awq_cuda.py" ;;
    *) return 1 ;;
    esac
}

cap_for() {
    case $1 in
    vision | batching-dense) echo 150 ;; vision-compiled | vision-padded) echo 240 ;; vision-gputests | vision-novel) echo 90 ;; batching-kernels) echo 300 ;; preprocess | int4-tiles) echo 90 ;; int4-triton | int4-joined) echo 300 ;; batching-triton) echo 420 ;; batching-joined) echo 300 ;;
    gputests | qwen3-gputests | batching-gputests | awq-gputests) echo 240 ;; patching-gputests | attention-gputests) echo 90 ;;
    admission | estimate-gputests) echo 500 ;; batching-profile | batching-profile-short) echo 330 ;; concurrency) echo 450 ;;
    qwen3 | concurrency-dense-ab | concurrency-batch16 | concurrency-a10 | concurrency-varied) echo 560 ;; qwen3-8b) echo 300 ;; batching-compiled) echo 300 ;; qwen3-concurrency) echo 330 ;; *) echo 400 ;;
    esac
}

for step in "$@"; do
    cmd=$(command_for "$step") || { echo "unknown step $step" >&2; exit 2; }
    left=$((budget - (SECONDS - start)))
    cap=$(cap_for "$step")
    limit=$((left < cap ? left : cap))
    if [ "$limit" -lt 30 ]; then
        echo "== $step: skipped, ${left}s left" | tee -a "$out/all.log"
        continue
    fi
    t0=$SECONDS
    # shellcheck disable=SC2086
    echo "== $step: $cmd" >>"$out/all.log"
    timeout "$limit" $cmd >"$out/$step.json" 2>"/tmp/$step.log"
    rc=$?
    cat "/tmp/$step.log" >>"$out/all.log"
    status=$([ $rc -eq 124 ] && echo timeout || echo "rc=$rc")
    echo "== $step: $status in $((SECONDS - t0))s" | tee -a "$out/all.log"
    tail -n 12 "/tmp/$step.log"
done
