#!/bin/bash
# Example sbatch script: 2 nodes x 4 GPUs, one gimbal-run per node.
#
#   sbatch examples/sbatch_gimbal_run.sh
#
# gimbal-run must run as ONE task per node (it starts torchrun, which starts
# one worker per GPU); it refuses to start otherwise (exit 2).
#SBATCH --job-name=mnistlike-gimbal
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=01:00:00
# Pre-emption / checkpoint notice: Slurm sends SIGUSR2 to the job step's
# tasks 120 s before the time limit (no "B:" so srun's tasks, i.e. gimbal-run,
# receive it).  gimbal-run forwards it to the training processes, which save a
# checkpoint and exit 75; gimbal-run then relaunches (or, once Slurm sends
# SIGTERM, stops).  SIGUSR1 is not used by gimbal.
#SBATCH --signal=USR2@120
#SBATCH --output=%x-%j.out

set -euo pipefail

# Where the gimbal daemon writes decisions/<jobid>.json and reads
# reports/<jobid>.jsonl; must be the same path the daemon uses.
export GIMBAL_STATE_DIR=${GIMBAL_STATE_DIR:-/var/spool/gimbal}
# Checkpoints must be on a filesystem every node can read (resume after relaunch).
export GIMBAL_CHECKPOINT_DIR=${GIMBAL_CHECKPOINT_DIR:-$HOME/checkpoints/$SLURM_JOB_ID}

# Print what each node will run (command + variables), then run it.
srun --ntasks-per-node=1 --kill-on-bad-exit=1 gimbal-run --dry-run -- \
    examples/train_mnistlike.py --steps 2000
exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 gimbal-run -- \
    examples/train_mnistlike.py --steps 2000 --poll-every 10
