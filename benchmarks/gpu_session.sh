#!/usr/bin/env bash
# The GPU measurements and CUDA tests of issue #10, re-run together in a few device calls.
#
# A lent GPU machine starts bare (no Tianshou, gymnasium, MuJoCo, ALE) and goes back 30 s after each
# call, so every call pays its start and its install: the checks are grouped into parts that each
# fit one call's 10 minutes, every check under its own time limit, so one that hangs or overruns
# still leaves the others' figures. Prepare here, once per checkout (ignored files are not cloned):
#
#   bash ../shared/tools/device-wheels.sh
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     torchrl==0.14.1 tensordict==0.14.3 pyvers hoptorch cloudpickle
#
# then, with `.whl` carried, one device call per line (each ~2-8 minutes). A session now has 15 device
# minutes, the machine's start included (~30 s), so take them in this order and stop where the time
# ends. On an H200 (2026-12-04, BENCHMARKS.md "Ninth GPU session") four runs at half the SMs each gave
# 2.05x one run alone, twice (`concurrent-mps-half`, `concurrent-mps-tf32`), and 2.69x as whole runs
# (`concurrent-mps-whole`, cut to 4 epochs); `evaluation-time` and `tests` passed there. What follows is
# the H100's story, where the same target stayed short. In TF32 (d4rl_cql.py's CUDA default
# since its learning check, `learning-tf32`, 2026-11-26 "Sixth H100 session") four runs at half the SMs
# each gave 1.92-1.97x one run alone (2026-11-26 and -27; 25%: 1.84x, 35%: 1.83x, 45%: 1.90x, 65%:
# 1.89x, uncapped: 1.64x); float32 (`--matmul-precision highest`) 1.70x at half shares. `profile`
# (2026-11-27 "Eighth H100 session") says why: one update holds the whole GPU for ~354 us of its ~680,
# so four runs together top out near 2820 updates/s; what would lift them is less time in the kernels
# that fill every multiprocessor (the critics' 7936-row products and elementwise passes) without a
# longer chain. Inductor's GEMM autotuning (`autotune`) made one run 12% and four 4% faster: 1.83x; a
# small cuBLAS workspace (`small-workspace`, no split-K) made four runs 7% slower. `critic-variants`
# profiles the same critics computed with fewer or better-aligned passes over their rows (the first
# layer's observation share once per state, not once per row, and its 6 action columns as a product
# or as one elementwise kernel; bias and ReLU in the products' epilogues; both critics' first layer
# as one product; biases inside the products; benchmarks/critic_variants.py). The first call below
# profiles the library's and the four likeliest (~6 min). Each profile ends with the ratio four runs
# would reach at its held-time bound (one run alone in the trainer over the held time; 1.92 for the
# library's critics, as measured). Time taken out of kernels that fill the GPU counts, and a variant
# needs ~28 us of it (BENCHMARKS.md, 2026-11-27). The variant with the highest ratio, if above the
# library's, is the one to time in d4rl_cql.py runs beside the library's (`concurrent-mps-variant`) and
# then to move into the library. `concurrent-mps-two` times two runs at shares below the whole GPU, not yet
# measured (whole GPU each: 1.31x). All those figures time training alone (one epoch, no evaluation in
# the window); `concurrent-mps-whole` (new, 2026-11-27) times whole runs as a sweep runs them, evaluations
# and checkpoints included: what "sweeps will pack runs this way" gains, since one run alone leaves the
# GPU idle while it evaluates. Record both readings; the training-only one is the strict one.
# `evaluation-time` says where that evaluation goes (envs, policy calls, the loop around them), with
# Tianshou's collector loop and with the evaluation collector's own (same scores; on the 2-core CPU
# 0.54 of the time, BENCHMARKS.md, 2026-11-27, fourth CPU session), now with the policy on the GPU.
#
#   bash benchmarks/gpu_session.sh tests concurrent-mps-half     (~3 min, then ~150 s: the CUDA tests, and
#                                                                the target re-read on this GPU)
#   bash benchmarks/gpu_session.sh evaluation-time concurrent-mps-whole  (~1 min, then ~6 min)
#   bash benchmarks/gpu_session.sh critic-variants                (5 profiles, ~70 s each)
#   VARIANT=best bash benchmarks/gpu_session.sh concurrent-mps-variant  (the library's and best's runs: ~350 s)
#   bash benchmarks/gpu_session.sh tests                          (93 s before the FQE test came)
#   PROFILE_VARIANTS="state-projection merged-first-layer bias-in-product merged-relu-in-product" \
#     bash benchmarks/gpu_session.sh critic-variants              (the other four)
#   bash benchmarks/gpu_session.sh concurrent-mps-half            (~150 s on 2026-11-27)
#   bash benchmarks/gpu_session.sh concurrent-mps-two throughput
#   bash benchmarks/gpu_session.sh concurrent-mps-tf32            (1, 2 and 4 runs: 204 s)
#   bash benchmarks/gpu_session.sh concurrent-mps concurrent      (float32)
#   bash benchmarks/gpu_session.sh concurrent-mps-shares          (45, 50, 55%: over 215 s)
#   bash benchmarks/gpu_session.sh small-workspace discrete-tf32  (312 + ~35 s)
#   bash benchmarks/gpu_session.sh discrete-dopamine   (the CQL authors' Atari network, captured, float32 and TF32: ~2 min;
#                                                       its CPU cost: BENCHMARKS.md, "Dopamine's network")
#   bash benchmarks/gpu_session.sh autotune                       (~330 s: a 235 s compile)
#   bash benchmarks/gpu_session.sh end-to-end
#   bash benchmarks/gpu_session.sh learning-tf32   (TF32's learning check, as run on 2026-11-26)
#
# Each check prints as it runs and writes $OUT/<check>.log (./gpu-session/ without $OUT); the last
# line of each says its exit status. Where Tianshou is already importable (a developer's own GPU
# machine with the project installed), nothing is installed. Its throughput parts last ran on an H100 on
# 2026-11-24 (BENCHMARKS.md, "Fourth H100 session"), the learning check on 2026-11-26 ("Sixth"), the
# tests, the profile and the concurrent parts on 2026-11-27 ("Seventh" and "Eighth H100 session").
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-session}
mkdir -p "$out"

# the wheels go to /tmp/site once per machine: a later call on the same warm machine finds them there
if ! python3 -c "import tianshou" 2>/dev/null; then
  if ! PYTHONPATH=/tmp/site python3 -c "import tianshou" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      echo "no Tianshou here and no .whl/ to install it from: run ../shared/tools/device-wheels.sh and carry .whl" >&2
      exit 2
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  fi
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
export EXCLUDE_TD_FROM_PYTREE=1  # what tensordict's CudaGraphModule asks for (TorchRL's column); as measured

# check NAME SECONDS COMMAND...: run COMMAND under a time limit, its output to the terminal and $out/NAME.log
check() {
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" | tee "$out/$name.log"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$out/$name.log"
  echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$out/$name.log"
}

# runs_archive LOGDIR NAME: the sweep LOGDIR/NAME as $out/NAME.tar.gz, settings, summaries and TensorBoard
# logs only (no checkpoints, no replay), so that it comes back from the device as one file
runs_archive() {
  tar czf "$out/$2.tar.gz" --exclude='*.pth' --exclude='*.hdf5' -C "$1" "$2" &&
    echo "== $2: runs in $out/$2.tar.gz ($(du -h "$out/$2.tar.gz" | cut -f1))"
}

for part in "$@"; do
  case $part in
    throughput)  # float32; TorchRL's three modes as columns when its wheels were carried
      check cql_sac_throughput 270 python3 benchmarks/cql_sac_throughput.py --device cuda --paths compiled \
        --updates 300 --rounds 3
      check discrete_cql_throughput 180 python3 benchmarks/discrete_cql_throughput.py --device cuda \
        --paths captured,host-fed --updates 300 --rounds 2 --transitions 20000
      # the quantile loss from sorted targets (CPU's default) against the pairwise one, captured; its own
      # process, so that a form the capture cannot take costs only this figure
      check discrete_loss_forms 150 python3 benchmarks/discrete_cql_throughput.py --device cuda \
        --paths captured,captured+sorted --updates 300 --rounds 2 --transitions 20000
      ;;
    tests)  # captured = eager, host feed, checkpoints across paths, exact resume on CUDA, export from a GPU, Q filter, FQE, α′
      check cuda_tests 240 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_host_feed.py \
        tests/test_discrete_staging.py tests/test_update_paths.py tests/test_cnn_variants.py tests/test_batch_per_file.py \
        -k "captured or cuda or checkpoint"
      check cuda_export 90 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_policy_export.py -k gpu
      check cuda_q_filter 60 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_q_filter.py -k cuda
      check cuda_exact_resume 150 python3 -m pytest -q -p no:logging -p no:cacheprovider \
        tests/test_exact_resume.py -k cuda
      check cuda_fqe 60 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_fqe.py -k cuda
      # the Lagrange multiplier α′ follows the gap on CUDA (Tianshou 2.0.1's never moves there)
      check cuda_lagrange 90 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_cql_sac_training.py -k cuda
      ;;
    concurrent)  # total updates/s of 1, 2 and 4 runs on one GPU, processes taking turns
      check concurrent_runs 290 python3 benchmarks/concurrent_runs.py --runs 1 2 4 --updates 20000 \
        -- --matmul-precision highest
      ;;
    concurrent-mps)  # float32: 1 run alone, then 4 through a private MPS daemon at half the SMs each (`sweep --mps`)
      check concurrent_runs_mps 240 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        -- --matmul-precision highest
      ;;
    concurrent-mps-shares)  # TF32: 1 run alone, then 4 runs at 45%, 50% and 55% of the SMs each (50%: 1.95x)
      check concurrent_runs_mps_shares 330 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        --mps-thread-percentage 45 50 55 -- --matmul-precision high
      ;;
    concurrent-mps-tf32)  # the same in TF32 (1.95x on 2026-11-26), with 2 runs
      check concurrent_runs_mps_tf32 300 python3 benchmarks/concurrent_runs.py --runs 1 2 4 --updates 20000 --mps \
        -- --matmul-precision high
      ;;
    concurrent-mps-two)  # TF32: 1 run alone, then 2 through MPS at 50%, 75% and 100% of the SMs each (100%: 1.31x)
      check concurrent_runs_mps_two 300 python3 benchmarks/concurrent_runs.py --runs 1 2 --updates 20000 --mps \
        --mps-thread-percentage 50 75 100 -- --matmul-precision high
      ;;
    concurrent-mps-half)  # TF32: 1 run alone, then 4 at half the SMs each (the sweep's default; 1.95-1.97x)
      check concurrent_runs_mps_half 240 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        -- --matmul-precision high
      ;;
    concurrent-mps-whole)  # TF32: whole runs as a sweep's trials train them (8 epochs of 5000 updates, each
      # ending with an evaluation of 10 episodes and a checkpoint), each run's rate counting its evaluations:
      # 1 run alone, then 4 at half the SMs each. One run leaves the GPU idle while it evaluates; four fill the gaps
      check concurrent_runs_mps_whole 480 python3 benchmarks/concurrent_runs.py --runs 1 4 --whole-runs 8 --mps \
        -- --matmul-precision high
      ;;
    evaluation-time)  # where one 10-episode HalfCheetah evaluation of d4rl_cql.py goes with the policy on the GPU:
      # envs, policy calls, or the loop (2026-11-27 on the 2-core CPU: Tianshou's 1.83 s, ours 0.98; envs 0.49,
      # policy 0.34)
      check evaluation_time 150 python3 benchmarks/evaluation_time.py --device cuda
      ;;
    autotune)  # the same with Inductor's GEMM autotuning (each product timed as cuBLAS and Triton kernels), its
      # compile time included in the warm-up line; a fresh compile cache, so that no untuned kernel is reused
      check concurrent_runs_mps_autotune 400 env TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 \
        TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-autotune python3 benchmarks/concurrent_runs.py --runs 1 4 \
        --updates 20000 --mps -- --matmul-precision high
      ;;
    learning-tf32)  # float32 against TF32, 2 seeds, 75k updates each, as one 4-trial sweep through MPS (~5 min)
      # Only 8 files, at most two folders down, come back from a device's $OUT: the sweep's runs travel as one
      # archive without their checkpoints. The device lacks rliable, so make the table here:
      #   tar xzf FILES_AT/learning-tf32.tar.gz -C /tmp && python -m offline_rl.results /tmp/learning-tf32
      check learning_tf32 420 python3 -m offline_rl.sweep --example d4rl_cql --grid seed=0,1 \
        --grid matmul_precision=highest,high --set task=HalfCheetah-v4 --set dataset_size=100000 --set epoch=5 \
        --set step_per_epoch=15000 --set test_num=10 --mps --jobs 4 --name learning-tf32 --logdir /tmp/gpu-sweeps
      runs_archive /tmp/gpu-sweeps learning-tf32
      ;;
    profile)  # TF32: where one 3x256 update spends the GPU, its kernel chain and how much of the GPU each kernel holds
      check cql_sac_profile 180 python3 benchmarks/cql_sac_profile.py --critic-layers 3 --updates 300 --top 25 \
        --matmul-precision high
      ;;
    critic-variants)  # TF32: the profile of each way to compute the critics (benchmarks/critic_variants.py),
      # the library's first; PROFILE_VARIANTS="A B ..." names which (default: the likeliest five, ~70 s each)
      for variant in ${PROFILE_VARIANTS:-ensemble pointwise-first-layer-relu-in-product state-projection-relu-in-product \
        pointwise-first-layer relu-in-product}; do
        check "cql_sac_profile_$variant" 150 python3 benchmarks/cql_sac_profile.py --critic-layers 3 --updates 300 \
          --top 12 --matmul-precision high --critic-variant "$variant"
      done
      ;;
    concurrent-mps-variant)  # TF32: 1 run alone and 4 at half shares with the library's critics, then the same
      # with every run's critics the $VARIANT way (one dataset, each against its own run alone)
      check "concurrent_runs_mps_${VARIANT:?set VARIANT to a name of benchmarks/critic_variants.py}" 540 \
        python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps --critic-variant ensemble "$VARIANT" \
        -- --matmul-precision high
      ;;
    small-workspace)  # TF32, cuBLAS given 16 KiB of workspace (too little for split-K's partial sums): the profile,
      # 1 run alone and 4 at half shares as they are, then 4 at half shares with the small workspace
      check cql_sac_profile_small_workspace 180 env CUBLAS_WORKSPACE_CONFIG=:16:1 python3 benchmarks/cql_sac_profile.py \
        --critic-layers 3 --updates 300 --top 25 --matmul-precision high
      check concurrent_runs_mps_half 240 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        -- --matmul-precision high
      check concurrent_runs_mps_small_workspace 200 env CUBLAS_WORKSPACE_CONFIG=:16:1 python3 \
        benchmarks/concurrent_runs.py --runs 4 --updates 20000 --mps -- --matmul-precision high
      ;;
    discrete-tf32)  # discrete CQL's captured update in TF32 (its convolutions are TF32 under cuDNN's default already)
      check discrete_cql_throughput_tf32 180 python3 benchmarks/discrete_cql_throughput.py --device cuda \
        --paths captured --updates 300 --rounds 2 --transitions 20000 --matmul-precision high
      ;;
    discrete-dopamine)  # the CQL authors' Atari network (--cnn dopamine, their presets): captured, both precisions
      for precision in highest high; do
        check "discrete_dopamine_$precision" 180 python3 benchmarks/discrete_cql_throughput.py --device cuda \
          --paths captured --updates 300 --rounds 2 --transitions 20000 --cnn dopamine --matmul-precision "$precision"
      done
      ;;
    end-to-end)  # d4rl_cql inside Tianshou's trainer: 120 000 updates, TF32 then float32
      for precision in high highest; do
        check "d4rl_cql_$precision" 270 python3 examples/d4rl_cql.py --task HalfCheetah-v4 --dataset-size 20000 \
          --test-num 2 --epoch 1 --step-per-epoch 120000 --matmul-precision "$precision" --logdir /tmp/gpu-session-log
      done
      ;;
    *)
      echo "unknown part '$part'; expected throughput, tests, concurrent, concurrent-mps, concurrent-mps-shares, concurrent-mps-tf32, concurrent-mps-two, concurrent-mps-half, concurrent-mps-whole, evaluation-time, autotune, learning-tf32, profile, critic-variants, concurrent-mps-variant, small-workspace, discrete-tf32, discrete-dopamine or end-to-end" >&2
      exit 2
      ;;
  esac
done
