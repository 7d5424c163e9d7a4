#!/usr/bin/env bash
# The GPU measurements and CUDA tests, run together in a few device calls.
#
# A lent GPU machine starts bare (no Tianshou, gymnasium, MuJoCo, ALE), so every call pays its start
# and its install: the checks are grouped into parts that each fit one call, every check under its own
# time limit, so one that hangs or overruns still leaves the others' figures. Prepare here, once per
# checkout (ignored files are not cloned):
#
#   bash ../shared/tools/device-wheels.sh
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     torchrl==0.14.1 tensordict==0.14.3 pyvers hoptorch cloudpickle
#
# then, with `.whl` carried, one device call per line, in the order of what matters most:
#
#   bash benchmarks/gpu_session.sh tests concurrent-mps-half       the CUDA tests; four runs through MPS at half shares
#   bash benchmarks/gpu_session.sh throughput end-to-end           the update against Tianshou's and TorchRL's; d4rl_cql.py in the trainer
#   bash benchmarks/gpu_session.sh new-algorithms                  TD3+BC, IQL, ReBRAC, BC captured = eager; their updates/s
#   bash benchmarks/gpu_session.sh seeds                           many seeds in one update: captured = eager; updates/s by S
#   bash benchmarks/gpu_session.sh seeds-beside                    4 runs through MPS; one run's update, unchanged
#   bash benchmarks/gpu_session.sh fine-tuning                     online fine-tuning: captured = eager; env steps/s
#   bash benchmarks/gpu_session.sh evaluation-time concurrent-mps-whole   where an evaluation goes; whole runs as a sweep trains them
#   bash benchmarks/gpu_session.sh learning-tf32                   TF32's learning check against float32
#   bash benchmarks/gpu_session.sh profile critic-variants         where one update spends the GPU, and other ways to compute the critics
#   bash benchmarks/gpu_session.sh concurrent concurrent-mps concurrent-mps-shares concurrent-mps-two concurrent-mps-tf32
#   bash benchmarks/gpu_session.sh discrete-tf32 discrete-dopamine small-workspace autotune
#   VARIANT=best bash benchmarks/gpu_session.sh concurrent-mps-variant
#
# Each check prints as it runs and writes $OUT/<check>.log (./gpu-session/ without $OUT); the last line
# of each says its exit status. Where Tianshou is already importable (a developer's own GPU machine
# with the project installed), nothing is installed. The latest figures are on docs/pages/benchmarks.md.
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
    new-algorithms)  # TD3+BC, IQL, ReBRAC and BC: captured (and compiled) = eager; updates/s against Tianshou's TD3BC
      check new_algorithm_paths 300 python3 -m pytest -q -p no:logging -p no:cacheprovider \
        tests/test_engine_paths_of_new_algorithms.py
      check new_algorithm_throughput 240 python3 benchmarks/offline_algorithms_throughput.py --device cuda \
        --updates 300 --rounds 3
      ;;
    seeds)  # many seeds in one update: captured (and compiled) = eager; aggregate updates/s of 1, 2, 4, 8, 16
      # seeds against one run alone (TF32, d4rl_cql.py's defaults) with each batch's memory
      check seed_batch_paths 200 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_seed_batch.py \
        -k captured
      check seed_batch_throughput 300 python3 benchmarks/seed_batch_throughput.py --device cuda \
        --seeds 1 2 4 8 16 --updates 300 --rounds 3
      ;;
    fine-tuning)  # online fine-tuning: its captured (and compiled) updates = eager ones while the online part
      # fills; then d4rl_cql.py offline and fine-tuned on Hopper, env steps per second of the online phase
      check fine_tuning_paths 200 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/test_fine_tuning.py \
        -k captured
      check fine_tuning_hopper 300 python3 examples/d4rl_cql.py --task Hopper-v4 --dataset-size 20000 \
        --step-per-epoch 2000 --epoch 1 --test-num 5 --online-steps 10000 --online-eval-interval 5000 \
        --mixing-ratio 0.5 --logdir "$out/fine-tuning-runs"
      ;;
    seeds-beside)  # what the batch is compared with: 4 runs through MPS at half shares (TF32), and one run's
      # update as the benchmark page last measured it (a single run is unchanged by the batch's engine)
      check concurrent_runs_mps_half 240 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        -- --matmul-precision high
      check cql_sac_throughput_tf32 200 python3 benchmarks/cql_sac_throughput.py --device cuda --paths compiled \
        --updates 300 --rounds 3 --matmul-precision high --torchrl none --d3rlpy none
      ;;
    concurrent)  # total updates/s of 1, 2 and 4 runs on one GPU, processes taking turns
      check concurrent_runs 290 python3 benchmarks/concurrent_runs.py --runs 1 2 4 --updates 20000 \
        -- --matmul-precision highest
      ;;
    concurrent-mps)  # float32: 1 run alone, then 4 through a private MPS daemon at half the SMs each (`sweep --mps`)
      check concurrent_runs_mps 240 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        -- --matmul-precision highest
      ;;
    concurrent-mps-shares)  # TF32: 1 run alone, then 4 runs at 45%, 50% and 55% of the SMs each
      check concurrent_runs_mps_shares 330 python3 benchmarks/concurrent_runs.py --runs 1 4 --updates 20000 --mps \
        --mps-thread-percentage 45 50 55 -- --matmul-precision high
      ;;
    concurrent-mps-tf32)  # the same in TF32, with 2 runs
      check concurrent_runs_mps_tf32 300 python3 benchmarks/concurrent_runs.py --runs 1 2 4 --updates 20000 --mps \
        -- --matmul-precision high
      ;;
    concurrent-mps-two)  # TF32: 1 run alone, then 2 through MPS at 50%, 75% and 100% of the SMs each
      check concurrent_runs_mps_two 300 python3 benchmarks/concurrent_runs.py --runs 1 2 --updates 20000 --mps \
        --mps-thread-percentage 50 75 100 -- --matmul-precision high
      ;;
    concurrent-mps-half)  # TF32: 1 run alone, then 4 at half the SMs each (the sweep's default)
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
      # envs, policy calls, or the loop around them (Tianshou's collector loop and the evaluation collector's)
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
      echo "unknown part '$part'; expected throughput, tests, new-algorithms, seeds, seeds-beside, concurrent, concurrent-mps, concurrent-mps-shares, concurrent-mps-tf32, concurrent-mps-two, concurrent-mps-half, concurrent-mps-whole, evaluation-time, autotune, learning-tf32, profile, critic-variants, concurrent-mps-variant, small-workspace, discrete-tf32, discrete-dopamine or end-to-end" >&2
      exit 2
      ;;
  esac
done
