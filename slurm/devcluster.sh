#!/usr/bin/env bash
# playpen local SLURM dev cluster: a REAL 2-node SLURM cluster on this one machine.
#
#   bash slurm/devcluster.sh start    install what is missing (apt), start munged, mariadb, slurmdbd,
#                                     slurmctld and 2 slurmd (node1, node2); wait until both nodes are idle
#   bash slurm/devcluster.sh stop     stop everything start started (daemons and the jobs on the nodes)
#   bash slurm/devcluster.sh status   which daemons run, sinfo, squeue (exit 0 only when all are up)
#   bash slurm/devcluster.sh env      prints `export SLURM_CONF=...`: eval "$(bash slurm/devcluster.sh env)"
#
# Environment:
#   PLAYPEN_DEVCLUSTER_DIR    state dir: conf, logs, spool, pids, database   [/tmp/playpen-devcluster]
#   PLAYPEN_DEVCLUSTER_PORT   base port: slurmctld=P, node1=P+1, node2=P+2, slurmdbd=P+3   [16817]
#   PLAYPEN_DEVCLUSTER_CPUS   CPUs per node (may exceed the real cores)      [max(2, nproc)]
#   PLAYPEN_DEVCLUSTER_MEM_MB RealMemory per node in MB                      [half the machine's memory]
#
# Why it looks like this (measured facts: shared/notes/slurm-on-one-machine.md):
# - no systemd: every daemon is started directly, all paths live in the state dir;
# - each slurmd runs under `unshare --uts --mount` with its own hostname and a private /etc/hosts, so jobs
#   see two distinct, resolvable hostnames (submitit uses the first node's name as MASTER_ADDR);
# - munged and mariadb are private instances (own socket in the state dir), so system ones are left alone;
# - ports are not the standard 6817/6818, so a real SLURM on the same machine does not clash.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${PLAYPEN_DEVCLUSTER_DIR:-/tmp/playpen-devcluster}"
PORT="${PLAYPEN_DEVCLUSTER_PORT:-16817}"
NODES=(node1 node2)
CONF="$STATE/etc/slurm.conf"
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

say() { echo "devcluster: $*"; }
die() { echo "devcluster: error: $*" >&2; exit 1; }

usage() {
    echo "usage: bash slurm/devcluster.sh {start|stop|status|env}" >&2
    exit 2
}

# ---------------------------------------------------------------- process bookkeeping
# A daemon counts as ours when its pid file (in the state dir) names a live process with the expected name;
# checking the name guards against a pid reused by an unrelated process after a crash.
pid_of() {  # pid_of NAME PIDFILE -> prints the pid when that process is alive and is NAME
    local name=$1 file=$2 pid
    [[ -s $file ]] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [[ -n $pid && -r /proc/$pid/comm ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
    echo "$pid"
}
munged_pid()    { pid_of munged    "$STATE/munge/munged.pid"; }
mariadbd_pid()  { pid_of mariadbd  "$STATE/run/mariadbd.pid"; }
slurmdbd_pid()  { pid_of slurmdbd  "$STATE/run/slurmdbd.pid"; }
slurmctld_pid() { pid_of slurmctld "$STATE/run/slurmctld.pid"; }
slurmd_pid()    { pid_of slurmd    "$STATE/run/slurmd-$1.pid"; }

all_running() {
    munged_pid >/dev/null && mariadbd_pid >/dev/null && slurmdbd_pid >/dev/null &&
        slurmctld_pid >/dev/null && slurmd_pid node1 >/dev/null && slurmd_pid node2 >/dev/null
}
any_running() {
    munged_pid >/dev/null || mariadbd_pid >/dev/null || slurmdbd_pid >/dev/null ||
        slurmctld_pid >/dev/null || slurmd_pid node1 >/dev/null || slurmd_pid node2 >/dev/null
}

# wait_for SECONDS DESCRIPTION LOGFILE COMMAND...: poll COMMAND every 0.1 s; on timeout show the log and fail.
wait_for() {
    local secs=$1 what=$2 log=$3; shift 3
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "devcluster: error: $what did not come up within ${secs}s; last lines of $log:" >&2
            tail -n 20 "$log" >&2 2>/dev/null || true
            exit 1
        fi
        sleep 0.1
    done
}

# Serialise start/stop (e.g. several pytest workers starting the cluster at once).
# Daemons must not inherit the lock fd, so every launch below closes fd 9.
take_lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock 9
}

# ---------------------------------------------------------------- install
install_if_missing() {
    local missing=0 b
    for b in slurmctld slurmd sinfo sacct munged slurmdbd mariadbd mariadb-install-db; do
        command -v "$b" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$b" >/dev/null 2>&1 || missing=1
    done
    ((missing)) || return 0
    command -v apt-get >/dev/null || die "SLURM is not installed and there is no apt-get to install it (need: ${PACKAGES[*]})"
    say "installing ${PACKAGES[*]} (apt-get, ~45 s)"
    # The packages' postinst would start system munge/mariadb services; a temporary policy-rc.d forbids that
    # (we run private instances). An existing policy-rc.d is left as it is.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    local rc=0
    { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
        >"${TMPDIR:-/tmp}/playpen-devcluster-apt.log" 2>&1 || rc=$?
    ((made_policy)) && rm -f "$policy"
    ((rc == 0)) || { tail -n 20 "${TMPDIR:-/tmp}/playpen-devcluster-apt.log" >&2; die "apt-get install failed (full log: ${TMPDIR:-/tmp}/playpen-devcluster-apt.log)"; }
}

# ---------------------------------------------------------------- configuration
write_config() {
    mkdir -p "$STATE"/{etc,log,run,spool/ctld,db}
    local n
    for n in "${NODES[@]}"; do mkdir -p "$STATE/spool/$n"; done
    chmod 755 "$STATE"

    local cpus mem_mb first_id
    cpus="${PLAYPEN_DEVCLUSTER_CPUS:-$(nproc)}"
    ((cpus >= 2)) || cpus=2
    mem_mb="${PLAYPEN_DEVCLUSTER_MEM_MB:-$(awk '/^MemTotal:/ {print int($2 / 1024 / 2)}' /proc/meminfo)}"
    # Time-based first job id: a fresh state dir must not reuse ids of an older cluster (see the notes).
    first_id=$(($(date +%s) % 60000000 + 1000000))

    local sub=(-e "s|@STATE@|$STATE|g" -e "s|@CTLD_PORT@|$PORT|g" -e "s|@NODE1_PORT@|$((PORT + 1))|g"
        -e "s|@NODE2_PORT@|$((PORT + 2))|g" -e "s|@DBD_PORT@|$((PORT + 3))|g" -e "s|@CPUS@|$cpus|g"
        -e "s|@MEM_MB@|$mem_mb|g" -e "s|@FIRST_JOB_ID@|$first_id|g")
    sed "${sub[@]}" "$SCRIPT_DIR/slurm.conf.in" >"$CONF"
    # slurmdbd insists on mode 600 and looks for slurmdbd.conf next to slurm.conf.
    (umask 077 && sed "${sub[@]}" "$SCRIPT_DIR/slurmdbd.conf.in" >"$STATE/etc/slurmdbd.conf")
    chmod 600 "$STATE/etc/slurmdbd.conf"

    # Hosts file the nodes see: the machine's own entries plus node1/node2 on the loopback address.
    { cat /etc/hosts; echo "127.0.0.1 ${NODES[*]}"; } >"$STATE/etc/hosts"
}

# ---------------------------------------------------------------- daemons
start_munged() {
    munged_pid >/dev/null && return 0
    # Our own munged with our own socket, using the machine's key (created by the munge package). It runs as
    # user munge, so it gets a directory of its own that it may write (pid, seed, socket).
    mkdir -p "$STATE/munge"
    chown munge:munge "$STATE/munge"
    chmod 755 "$STATE/munge"
    rm -f "$STATE/munge/munge.socket" "$STATE/munge/munge.socket.lock"
    runuser -u munge -- munged --socket="$STATE/munge/munge.socket" --pid-file="$STATE/munge/munged.pid" \
        --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed" 9>&-
    wait_for 10 munged "$STATE/munge/munged.log" test -S "$STATE/munge/munge.socket"
}

mariadb_ping() { mariadb-admin --no-defaults --socket="$STATE/run/mysqld.sock" -uroot ping; }

start_mariadb() {
    mariadbd_pid >/dev/null && return 0
    local try
    # A transient "error 28" during table creation was seen once on this machine: retry from a clean datadir.
    for try in 1 2 3; do
        if [[ ! -e $STATE/db/.initialised ]]; then
            rm -rf "$STATE/db" && mkdir -p "$STATE/db"
            if mariadb-install-db --no-defaults --datadir="$STATE/db" --user=root --skip-test-db \
                --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1 9>&-; then
                touch "$STATE/db/.initialised"
            else
                say "mariadb-install-db failed (try $try/3), retrying"; sleep 1; continue
            fi
        fi
        rm -f "$STATE/run/mysqld.sock"
        # Socket only (--skip-networking): nothing listens on TCP. Native AIO off: it fails in some containers.
        setsid mariadbd --no-defaults --datadir="$STATE/db" --socket="$STATE/run/mysqld.sock" \
            --pid-file="$STATE/run/mariadbd.pid" --log-error="$STATE/log/mariadb.log" --user=root \
            --skip-networking --innodb-use-native-aio=0 </dev/null >/dev/null 2>&1 9>&- &
        local deadline=$((SECONDS + 30))
        while ((SECONDS < deadline)); do
            mariadb_ping >/dev/null 2>&1 && return 0
            kill -0 $! 2>/dev/null || break   # mariadbd died: retry
            sleep 0.1
        done
        say "mariadb did not come up (try $try/3), retrying"
        kill $! 2>/dev/null || true
        rm -f "$STATE/db/.initialised"
        sleep 1
    done
    tail -n 20 "$STATE/log/mariadb.log" >&2 2>/dev/null || true
    die "mariadb did not start (log: $STATE/log/mariadb.log)"
}

cluster_registered() { sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx playpendev; }

start_slurmdbd() {
    slurmdbd_pid >/dev/null || {
        # slurmdbd finds slurmdbd.conf next to $SLURM_CONF; MYSQL_UNIX_PORT points the client lib at our socket.
        SLURM_CONF="$CONF" MYSQL_UNIX_PORT="$STATE/run/mysqld.sock" setsid slurmdbd </dev/null 9>&-
    }
    # Ready when sacctmgr gets an answer; register the cluster so slurmctld can report jobs at once.
    wait_for 30 slurmdbd "$STATE/log/slurmdbd.log" sacctmgr -n show cluster
    cluster_registered || sacctmgr -i add cluster playpendev >/dev/null
}

start_slurmctld() {
    slurmctld_pid >/dev/null || setsid slurmctld -f "$CONF" </dev/null 9>&-
    wait_for 30 slurmctld "$STATE/log/slurmctld.log" bash -c 'scontrol ping | grep -q UP'
}

start_slurmd() {  # start_slurmd NODE
    local node=$1
    slurmd_pid "$node" >/dev/null && return 0
    # Own UTS namespace: the node (and every job on it) has hostname $node. Own mount namespace: a private
    # /etc/hosts that resolves node1/node2, and the cluster's conf dir over /etc/slurm so job steps find
    # slurm.conf even when SLURM_CONF was stripped from their environment (submitit's clean_env does that).
    # slurmd daemonises; the namespaces live as long as it (and its jobs) do.
    setsid unshare --uts --mount --propagation private -- /bin/sh -c '
        set -e
        hostname "$1"
        mount --bind "$2/etc/hosts" /etc/hosts
        if [ -d /etc/slurm ]; then mount --bind "$2/etc" /etc/slurm; fi
        exec slurmd -f "$2/etc/slurm.conf" -N "$1"' sh "$node" "$STATE" </dev/null 9>&-
    wait_for 10 "slurmd $node" "$STATE/log/slurmd-$node.log" slurmd_pid "$node"
    # Remember the node's mount namespace: `stop` ends every process in it (slurmd, slurmstepd, jobs).
    readlink "/proc/$(slurmd_pid "$node")/ns/mnt" >"$STATE/run/$node.mntns"
}

nodes_idle() {
    local states
    states=$(sinfo -h -N -p debug -o '%N %t' | sort -u)
    [[ $states == $'node1 idle\nnode2 idle' ]]
}

print_usage_hint() {
    cat <<EOF
devcluster: up: nodes node1 node2, partitions debug (default, MaxNodes=2) and urgent (preempts debug by requeue)
  use it from this shell:  eval "\$(bash slurm/devcluster.sh env)"   (sets SLURM_CONF=$CONF)
  then e.g.:               sinfo; sbatch -N2 --wrap 'srun hostname'; squeue; sacct
  stop it:                 make devcluster-stop   (state and logs stay in $STATE)
EOF
}

# ---------------------------------------------------------------- commands
cmd_start() {
    [[ $(id -u) == 0 ]] || die "start must run as root (it installs packages and runs the SLURM daemons as root); try: sudo bash slurm/devcluster.sh start"
    command -v unshare >/dev/null || die "unshare (util-linux) is needed to give each node its own hostname"
    export PATH="$PATH:/usr/sbin:/sbin"
    take_lock
    if all_running; then
        say "already running (state dir $STATE)"
        print_usage_hint
        return 0
    fi
    install_if_missing
    local t0=$SECONDS
    # Regenerate the config only when nothing runs: running daemons must keep seeing the file they read.
    any_running || write_config
    export SLURM_CONF="$CONF"
    start_munged
    start_mariadb
    start_slurmdbd
    start_slurmctld
    local n
    for n in "${NODES[@]}"; do start_slurmd "$n"; done
    wait_for 60 "node1/node2 idle" "$STATE/log/slurmctld.log" nodes_idle
    say "started in $((SECONDS - t0)) s"
    sinfo
    print_usage_hint
}

cmd_stop() {
    [[ $(id -u) == 0 ]] || die "stop must run as root (the daemons run as root)"
    [[ -d $STATE ]] || { say "not running (no state dir $STATE)"; return 0; }
    take_lock
    local pids=() p n ns
    # The daemons we started, by pid file.
    for p in "$(munged_pid)" "$(mariadbd_pid)" "$(slurmdbd_pid)" "$(slurmctld_pid)"; do
        [[ -n $p ]] && pids+=("$p")
    done 2>/dev/null
    # Everything inside the nodes' private mount namespaces: slurmd, slurmstepd and the jobs they run.
    # Those namespaces were created by start, so nothing else lives in them.
    local init_ns
    init_ns=$(readlink /proc/1/ns/mnt 2>/dev/null || true)
    for n in "${NODES[@]}"; do
        [[ -s $STATE/run/$n.mntns ]] || continue
        ns=$(cat "$STATE/run/$n.mntns")
        [[ -n $ns && $ns != "$init_ns" && $ns != "$(readlink /proc/$$/ns/mnt)" ]] || continue
        for p in /proc/[0-9]*; do
            [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "$ns" ]] && pids+=("${p#/proc/}")
        done
    done
    if ((${#pids[@]} == 0)); then
        say "not running"
        rm -f "$STATE"/run/*.mntns
        return 0
    fi
    # All at once: each daemon needs ~2 s to exit after SIGTERM.
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local t0=$SECONDS deadline=$((SECONDS + 15)) alive
    while :; do
        alive=()
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
        ((${#alive[@]} == 0)) && break
        if ((SECONDS >= deadline)); then
            say "killing ${#alive[@]} process(es) that ignored SIGTERM"
            kill -KILL "${alive[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    rm -f "$STATE"/run/*.mntns
    say "stopped ${#pids[@]} process(es) in $((SECONDS - t0)) s (state and logs kept in $STATE)"
}

cmd_status() {
    export PATH="$PATH:/usr/sbin:/sbin" SLURM_CONF="$CONF"
    local up=1 name pid
    for name in munged mariadbd slurmdbd slurmctld "slurmd node1" "slurmd node2"; do
        # shellcheck disable=SC2086
        if pid=$(${name%% *}_pid ${name#* } 2>/dev/null) && [[ -n $pid ]]; then
            printf '  %-13s running (pid %s)\n' "$name" "$pid"
        else
            printf '  %-13s not running\n' "$name"; up=0
        fi
    done
    if ((up)); then
        echo "devcluster: up (state dir $STATE, SLURM_CONF=$CONF)"
        sinfo
        squeue
        return 0
    fi
    echo "devcluster: not (fully) running (state dir $STATE)"
    return 3
}

cmd_env() {
    [[ -f $CONF ]] || echo "devcluster: warning: $CONF does not exist yet; run: bash slurm/devcluster.sh start" >&2
    echo "export SLURM_CONF=$CONF"
    echo "export PLAYPEN_DEVCLUSTER_DIR=$STATE"
}

(($# == 1)) || usage
case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    -h | --help | help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) usage ;;
esac
