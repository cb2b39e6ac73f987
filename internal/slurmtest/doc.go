// Package slurmtest starts a real, single-node Slurm cluster on loopback for
// tests: munged with its own key and socket, slurmctld and slurmd from
// Debian's packages (scripts/deps.sh installs them), each in the foreground
// under the test, with a minimal slurm.conf in a temporary directory and
// free ports. Commands reach it through SLURM_CONF (Cluster.Env).
//
// The slurm executor's tests run against it, so what they exercise is
// sbatch job arrays, afterok dependencies and scontrol as a real cluster
// implements them, not a model of them. A cluster that cannot start skips
// the test locally and fails it when CI=true: CI never skips.
package slurmtest
