#!/usr/bin/env bash
# A real one-node Slurm cluster for tests and benchmarks, without systemd
# (shared/SLURM.md has the measurements behind each setting).
#
#   scripts/slurm-cluster.sh up     start munged (unless one answers), slurmctld, slurmd
#   scripts/slurm-cluster.sh down   stop what `up` started, by pid, and delete the state
#   scripts/slurm-cluster.sh env    print the line that points Slurm's clients at it
#
# Everything lives under one directory, $OKSTRA_SLURM_DIR (default
# /tmp/okstra-slurm): slurm.conf, state, spool, logs and pid files. Clients
# find the cluster through SLURM_CONF=$OKSTRA_SLURM_DIR/slurm.conf, so
# /etc/slurm is never written. Starting the daemons needs root; jobs may then
# be submitted by anyone. Needs Debian's slurm-wlm and munge
# (`apt-get install --no-install-recommends slurm-wlm munge`).
set -euo pipefail

dir=${OKSTRA_SLURM_DIR:-/tmp/okstra-slurm}
conf=$dir/slurm.conf
partition=${OKSTRA_SLURM_PARTITION:-debug}
ctld_port=${OKSTRA_SLURM_PORT:-6817}
node=$(hostname -s)

say() { echo "slurm-cluster: $*" >&2; }

# Wait until the process of a pid file has exited (at most $2 seconds).
stop_pidfile() {
    local file=$1 limit=${2:-20} pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq $((limit * 10))); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    say "pid $pid ($file) did not exit after ${limit}s; killing it"
    kill -9 "$pid" 2>/dev/null || true
}

# Whether the process of a pid file is running.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

up() {
    [ "$(id -u)" -eq 0 ] || { say "starting Slurm's daemons needs root"; exit 1; }
    for tool in munged slurmctld slurmd sinfo sbatch; do
        command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
            say "$tool is missing: apt-get install --no-install-recommends slurm-wlm munge"
            exit 1
        }
    done
    if alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid"; then
        say "already up ($dir)"
        env_line
        return 0
    fi
    # Half a cluster (one daemon gone: a run killed mid-way) would leave its
    # node down and every job pending: what is left of it is stopped, and
    # the cluster made afresh.
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    rm -rf "$dir"
    mkdir -p "$dir/state" "$dir/spool"
    if ! munge_answers; then
        install -d -o munge -g munge -m 0755 /run/munge
        runuser -u munge -- /usr/sbin/munged
        for _ in $(seq 50); do munge_answers && break; sleep 0.1; done
        munge_answers || { say "munged does not answer"; exit 1; }
        # Only a munged this script started is stopped by `down`.
        cp /run/munge/munged.pid "$dir/munged.pid"
    fi
    cat >"$conf" <<CONF
ClusterName=okstra
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=32 State=UNKNOWN
PartitionName=$partition Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF=$conf
    /usr/sbin/slurmctld -f "$conf"
    /usr/sbin/slurmd -f "$conf"
    for _ in $(seq 100); do
        [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
        sleep 0.1
    done
    [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || {
        say "the node did not come up idle; see $dir/slurmctld.log and $dir/slurmd.log"
        exit 1
    }
    say "up: partition $partition on node $node ($dir)"
    env_line
}

down() {
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    stop_pidfile "$dir/munged.pid"
    rm -rf "$dir"
    say "down"
}

env_line() { echo "export SLURM_CONF=$conf"; }

case ${1:-} in
up) up ;;
down) down ;;
env) env_line ;;
*)
    echo "usage: $0 up|down|env" >&2
    exit 2
    ;;
esac
