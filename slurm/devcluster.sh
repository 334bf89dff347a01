#!/usr/bin/env bash
# playpen local SLURM dev cluster: a REAL 2-node SLURM cluster on this one machine.
#
#   bash slurm/devcluster.sh start    install what is missing (apt), start munged, mariadb, slurmdbd,
#                                     slurmctld and 2 slurmd (node1, node2); wait until both nodes are idle
#   bash slurm/devcluster.sh stop     cancel all jobs, stop everything start started (state and logs stay)
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
# - no systemd: every daemon is started directly, all its paths point into the state dir;
# - each slurmd runs under `unshare --uts --mount` with its own hostname and a private /etc/hosts, so jobs
#   see two distinct, resolvable hostnames (submitit uses the first node's name as MASTER_ADDR);
# - munged (own key, own socket) and mariadb (socket only) are private instances: system ones stay untouched;
# - ports are not the standard 6817/6818, so a real SLURM on the same machine does not clash.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${PLAYPEN_DEVCLUSTER_DIR:-/tmp/playpen-devcluster}"
PORT="${PLAYPEN_DEVCLUSTER_PORT:-16817}"
NODES=(node1 node2)
CONF="$STATE/etc/slurm.conf"
MYSQL_SOCK="$STATE/run/mysqld.sock"
MUNGE_SOCK="$STATE/munge/munge.socket"
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
# Debian puts the daemons in /usr/sbin, which a non-login root shell may lack.
export PATH="$PATH:/usr/sbin:/sbin"

say() { echo "devcluster: $*"; }
die() {
    echo "devcluster: error: $*" >&2
    exit 1
}
usage() {
    echo "usage: bash slurm/devcluster.sh {start|stop|status|env}" >&2
    exit 2
}

# ---------------------------------------------------------------- process bookkeeping
# A daemon counts as ours when its pid file (in the state dir) names a live process with the expected name;
# checking the name guards against a pid reused by an unrelated process after a crash.
pid_of() { # pid_of NAME PIDFILE -> prints the pid when that process is alive and is NAME
    local name=$1 file=$2 pid
    [[ -r $file && -s $file ]] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
    echo "$pid"
}
daemon_pid() { # daemon_pid munged|mariadbd|slurmdbd|slurmctld|node1|node2
    case $1 in
        munged) pid_of munged "$STATE/munge/munged.pid" ;;
        mariadbd | slurmdbd | slurmctld) pid_of "$1" "$STATE/run/$1.pid" ;;
        node*) pid_of slurmd "$STATE/run/slurmd-$1.pid" ;;
    esac
}
DAEMONS=(munged mariadbd slurmdbd slurmctld "${NODES[@]}")

count_running() {
    local d n=0
    for d in "${DAEMONS[@]}"; do daemon_pid "$d" >/dev/null && n=$((n + 1)); done
    echo "$n"
}

# wait_for SECONDS DESCRIPTION LOGFILE COMMAND...: poll COMMAND every 0.1 s; on timeout show the log and fail.
wait_for() {
    local secs=$1 what=$2 log=$3
    shift 3
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

# launch LOG COMMAND...: run a daemon that forks into the background; its early output goes to LOG. When
# it fails before forking, say so with the end of LOG (set -e alone would end the script silently).
launch() {
    local log=$1
    shift
    if ! "$@" </dev/null >>"$log" 2>&1 9>&-; then
        echo "devcluster: error: $1 failed to start; last lines of $log:" >&2
        tail -n 20 "$log" >&2 2>/dev/null || true
        exit 1
    fi
}

# Serialise start/stop (e.g. several pytest workers starting the cluster at once). The daemons must not
# inherit the lock, so every launch below closes fd 9 (`9>&-`).
take_lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock 9
}

# ---------------------------------------------------------------- install and preflight
install_if_missing() {
    local b missing=()
    for b in slurmctld slurmd sbatch sacct munged slurmdbd mariadbd mariadb-install-db; do
        command -v "$b" >/dev/null || missing+=("$b")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install ${PACKAGES[*]}"
    local log="${TMPDIR:-/tmp}/playpen-devcluster-apt.log"
    say "installing ${PACKAGES[*]} with apt-get (~1 min, log: $log)"
    # The packages' postinst would start the system munge and mariadb services; a temporary policy-rc.d
    # forbids that (we run private instances). An existing policy-rc.d is left as it is.
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PACKAGES[@]}"
    } >"$log" 2>&1 || rc=$?
    if ((made_policy)); then rm -f "$policy"; fi
    if ((rc != 0)); then
        tail -n 20 "$log" >&2
        die "apt-get install ${PACKAGES[*]} failed (log: $log)"
    fi
}

preflight() {
    # Each node needs its own UTS and mount namespace: root with CAP_SYS_ADMIN (a VM or privileged container).
    unshare --uts --mount true 2>/dev/null ||
        die "cannot create namespaces (unshare --uts --mount): needs CAP_SYS_ADMIN (a VM or privileged container)"
    # Bash's /dev/tcp connects when something listens: those ports belong to someone else.
    local p
    for p in "$PORT" $((PORT + 1)) $((PORT + 2)) $((PORT + 3)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            die "port $p is in use (another SLURM?); choose PLAYPEN_DEVCLUSTER_PORT=<base> (uses base..base+3)"
        fi
    done
}

# ---------------------------------------------------------------- configuration
write_config() {
    mkdir -p "$STATE"/{etc,log,run,munge,spool/ctld} "${NODES[@]/#/$STATE/spool/}"
    chmod 755 "$STATE" "$STATE/run"

    local cpus mem_mb first_id
    cpus="${PLAYPEN_DEVCLUSTER_CPUS:-$(nproc)}"
    if ((cpus < 2)); then cpus=2; fi
    mem_mb="${PLAYPEN_DEVCLUSTER_MEM_MB:-$(awk '/^MemTotal:/ {print int($2 / 1024 / 2)}' /proc/meminfo)}"
    # Clock-based: a fresh state dir must not reuse the job ids of an older cluster (submitit would return a
    # stale result.pkl of an older job with the same id). Stays below slurm's MaxJobId (67043328).
    first_id=$(($(date +%s) % 60000000 + 1000000))

    local sub=(-e "s|@STATE@|$STATE|g" -e "s|@CTLD_PORT@|$PORT|g" -e "s|@NODE1_PORT@|$((PORT + 1))|g"
        -e "s|@NODE2_PORT@|$((PORT + 2))|g" -e "s|@DBD_PORT@|$((PORT + 3))|g" -e "s|@CPUS@|$cpus|g"
        -e "s|@MEM_MB@|$mem_mb|g" -e "s|@FIRST_JOB_ID@|$first_id|g")
    sed "${sub[@]}" "$SCRIPT_DIR/slurm.conf.in" >"$CONF"
    # slurmdbd insists on mode 600 and reads slurmdbd.conf from the directory of slurm.conf.
    (umask 077 && sed "${sub[@]}" "$SCRIPT_DIR/slurmdbd.conf.in" >"$STATE/etc/slurmdbd.conf")

    # The hosts file the nodes see: the machine's own entries plus node1/node2 on the loopback address.
    { cat /etc/hosts; echo "127.0.0.1 ${NODES[*]}"; } >"$STATE/etc/hosts"
}

# ---------------------------------------------------------------- daemons (in dependency order)
start_munged() {
    daemon_pid munged >/dev/null && return 0
    # munged runs as user munge, so it gets a directory of its own (key, pid, seed, log, socket), and a key of
    # its own: the machine's /etc/munge/munge.key is neither needed nor touched.
    chown munge:munge "$STATE/munge"
    chmod 755 "$STATE/munge"
    if [[ ! -s $STATE/munge/munge.key ]]; then
        (umask 077 && head -c 1024 /dev/urandom >"$STATE/munge/munge.key")
    fi
    chown munge:munge "$STATE/munge/munge.key"
    rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
    # (Its log file must be owned by munge, so its early output goes to a separate root-owned file.)
    launch "$STATE/log/munged.out" runuser -u munge -- munged --socket="$MUNGE_SOCK" \
        --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
        --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed"
    wait_for 10 munged "$STATE/munge/munged.log" test -S "$MUNGE_SOCK"
}

mariadb_up() { mariadb-admin --no-defaults --socket="$MYSQL_SOCK" -uroot ping; }

start_mariadb() {
    daemon_pid mariadbd >/dev/null && return 0
    local try pid deadline
    # A transient "error 28" during table creation was seen once on this machine: retry from a clean datadir.
    for try in 1 2 3; do
        if [[ ! -e $STATE/db/.initialised ]]; then
            rm -rf "$STATE/db"
            mkdir -p "$STATE/db"
            if mariadb-install-db --no-defaults --datadir="$STATE/db" --user=root --skip-test-db \
                --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1 9>&-; then
                touch "$STATE/db/.initialised"
            else
                say "mariadb-install-db failed (try $try/3; log: $STATE/log/mariadb-install.log)"
                sleep 1
                continue
            fi
        fi
        rm -f "$MYSQL_SOCK"
        # Socket only (--skip-networking): nothing listens on TCP. Native AIO off: it fails in some sandboxes.
        setsid mariadbd --no-defaults --datadir="$STATE/db" --socket="$MYSQL_SOCK" \
            --pid-file="$STATE/run/mariadbd.pid" --log-error="$STATE/log/mariadb.log" --user=root \
            --skip-networking --innodb-use-native-aio=0 </dev/null >>"$STATE/log/mariadb.log" 2>&1 9>&- &
        pid=$!
        deadline=$((SECONDS + 30))
        while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
            if mariadb_up >/dev/null 2>&1; then
                # The pid file is created mode 660: let `status` read it as any user.
                chmod 644 "$STATE/run/mariadbd.pid"
                return 0
            fi
            sleep 0.1
        done
        say "mariadb did not come up (try $try/3; log: $STATE/log/mariadb.log)"
        kill "$pid" 2>/dev/null || true
        rm -f "$STATE/db/.initialised"
        sleep 1
    done
    tail -n 20 "$STATE/log/mariadb.log" >&2 2>/dev/null || true
    die "mariadb did not start (log: $STATE/log/mariadb.log)"
}

dbd_answers() { sacctmgr -n show cluster; }

start_slurmdbd() {
    local try pid deadline
    # The first start creates the schema (~2 s), where mariadb once failed transiently: retry a dead slurmdbd.
    for try in 1 2 3; do
        if ! daemon_pid slurmdbd >/dev/null; then
            # In the foreground (-D, sent to the background here), so $! tells whether it died while creating
            # the schema. slurmdbd reads slurmdbd.conf next to $SLURM_CONF; MYSQL_UNIX_PORT names our socket.
            SLURM_CONF="$CONF" MYSQL_UNIX_PORT="$MYSQL_SOCK" setsid slurmdbd -D \
                </dev/null >>"$STATE/log/slurmdbd.log" 2>&1 9>&- &
            pid=$!
        else
            pid=$(daemon_pid slurmdbd)
        fi
        deadline=$((SECONDS + 30))
        while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
            if dbd_answers >/dev/null 2>&1; then
                # Register the cluster now (it creates the cluster's tables), so slurmctld reports jobs at once.
                if ! sacctmgr -n -P show cluster format=cluster | grep -qx playpendev; then
                    sacctmgr -i add cluster playpendev >/dev/null
                fi
                return 0
            fi
            sleep 0.1
        done
        say "slurmdbd did not come up (try $try/3; log: $STATE/log/slurmdbd.log)"
        kill "$pid" 2>/dev/null || true
        sleep 1
    done
    tail -n 20 "$STATE/log/slurmdbd.log" >&2 2>/dev/null || true
    die "slurmdbd did not start (log: $STATE/log/slurmdbd.log)"
}

# Job ids must never repeat on this cluster (see write_config): start above the clock-based FirstJobId and
# above the highest id the accounting db has seen (a restart may come sooner than ids were used up).
bump_first_job_id() {
    local conf_id db_max
    conf_id=$(sed -n 's/^FirstJobId=//p' "$CONF")
    db_max=$(mariadb --no-defaults --socket="$MYSQL_SOCK" -uroot -N -B \
        -e 'SELECT COALESCE(MAX(id_job), 0) FROM playpendev_acct.playpendev_job_table' 2>/dev/null || echo 0)
    if ((db_max >= conf_id)); then
        sed -i "s/^FirstJobId=.*/FirstJobId=$((db_max + 1))/" "$CONF"
    fi
}

ctld_answers() { scontrol ping | grep -q UP; }

start_slurmctld() {
    if ! daemon_pid slurmctld >/dev/null; then
        bump_first_job_id
        # -c: start from a clean job and node state. stop cancels all jobs anyway, and after a crash the saved
        # state would hold dead "running" jobs that keep the nodes allocated. History stays in sacct.
        launch "$STATE/log/slurmctld.log" setsid slurmctld -c -f "$CONF"
    fi
    wait_for 30 slurmctld "$STATE/log/slurmctld.log" ctld_answers
}

start_slurmd() { # start_slurmd NODE
    local node=$1 log="$STATE/log/slurmd-$1.log"
    daemon_pid "$node" >/dev/null && return 0
    # Own UTS namespace: the node, and every job on it, has hostname $node. Own mount namespace: a private
    # /etc/hosts that resolves node1/node2, and the cluster's conf dir over /etc/slurm, so jobs find slurm.conf
    # even when SLURM_CONF was stripped from their environment (submitit's clean_env drops SLURM_*).
    # slurmd daemonises; the namespaces live as long as it and its jobs do.
    # shellcheck disable=SC2016  # $1/$2 expand in the inner shell
    launch "$log" setsid unshare --uts --mount --propagation private -- /bin/sh -c '
        set -e
        hostname "$1"
        mount --bind "$2/etc/hosts" /etc/hosts
        if [ -d /etc/slurm ]; then mount --bind "$2/etc" /etc/slurm; fi
        exec slurmd -f "$2/etc/slurm.conf" -N "$1"' sh "$node" "$STATE"
    wait_for 10 "slurmd $node" "$log" daemon_pid "$node"
    # Remember the node's mount namespace: stop ends every process left in it (slurmd, slurmstepd, jobs).
    readlink "/proc/$(daemon_pid "$node")/ns/mnt" >"$STATE/run/$node.mntns"
}

nodes_idle() { [[ $(sinfo -h -N -p debug -o '%N %t' | sort -u) == $'node1 idle\nnode2 idle' ]]; }

print_usage_hint() {
    # Repeat a non-default state dir in the hints, so copy-pasting them reaches this cluster.
    local prefix=""
    if [[ -n ${PLAYPEN_DEVCLUSTER_DIR:-} ]]; then prefix="PLAYPEN_DEVCLUSTER_DIR=$STATE "; fi
    cat <<EOF
devcluster: up: nodes node1 node2, partitions debug (default, MaxNodes=2) and urgent (preempts debug by requeue)
  use it from a shell:  export SLURM_CONF=$CONF
                        (or: eval "\$(${prefix}bash slurm/devcluster.sh env)")
  then e.g.:            sinfo; sbatch -N2 --wrap 'srun hostname'; squeue; sacct
  stop it:              ${prefix}bash slurm/devcluster.sh stop   (make devcluster-stop; state and logs stay in $STATE)
EOF
}

# ---------------------------------------------------------------- commands
cmd_start() {
    [[ $(id -u) == 0 ]] ||
        die "start must run as root (it installs packages, runs the daemons); try: sudo bash slurm/devcluster.sh start"
    take_lock
    local running
    running=$(count_running)
    if ((running == ${#DAEMONS[@]})); then
        say "already running (state dir $STATE)"
        print_usage_hint
        return 0
    fi
    install_if_missing
    local t0=$SECONDS
    # A cluster started here is a hand-started one: tests/devcluster.py must not stop it (it marks its own).
    rm -f "$STATE/run/started-by-pytest"
    export SLURM_CONF="$CONF"
    # Regenerate the config only when nothing runs: running daemons keep the file they read. Daemons left
    # from a partial start are reused; the missing ones are started.
    if ((running == 0)); then
        preflight
        write_config
    fi
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
    if [[ ! -d $STATE ]]; then
        say "not running (no state dir $STATE)"
        return 0
    fi
    take_lock
    export SLURM_CONF="$CONF"
    # Cancel the jobs while slurmctld still runs: slurmstepd ignores SIGTERM, so killing it directly would
    # cost the SIGKILL timeout below. The cluster is private: every job on it belongs to it.
    local jobs deadline
    if daemon_pid slurmctld >/dev/null && jobs=$(squeue -h -o %A 2>/dev/null) && [[ -n $jobs ]]; then
        # shellcheck disable=SC2086  # one word per job id
        scancel $jobs 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while [[ -n $(squeue -h -o %A 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.2; done
    fi

    local pids=() d p n ns init_ns self_ns
    for d in munged mariadbd slurmdbd slurmctld; do
        if p=$(daemon_pid "$d"); then pids+=("$p"); fi
    done
    # Everything inside the nodes' mount namespaces: slurmd, and slurmstepd and job processes left over.
    # Those namespaces were created by start, so nothing else lives in them.
    init_ns=$(readlink /proc/1/ns/mnt 2>/dev/null || true)
    self_ns=$(readlink /proc/$$/ns/mnt)
    for n in "${NODES[@]}"; do
        ns=$(cat "$STATE/run/$n.mntns" 2>/dev/null || true)
        [[ -n $ns && $ns != "$init_ns" && $ns != "$self_ns" ]] || continue
        # One pass over /proc: "<namespace> /proc/<pid>/ns" per process, keep the pids in this namespace.
        mapfile -t -O "${#pids[@]}" pids < <(find /proc/[0-9]*/ns/mnt -maxdepth 0 -printf '%l %h\n' 2>/dev/null |
            awk -v ns="$ns" '$1 == ns { split($2, part, "/"); print part[3] }')
    done
    rm -f "$STATE"/run/*.mntns "$STATE/run/started-by-pytest"
    if ((${#pids[@]} == 0)); then
        say "not running"
        return 0
    fi

    # All at once: each daemon takes ~2 s to exit after SIGTERM.
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local t0=$SECONDS alive
    deadline=$((SECONDS + 15))
    while :; do
        alive=()
        for p in "${pids[@]}"; do
            if kill -0 "$p" 2>/dev/null; then alive+=("$p"); fi
        done
        ((${#alive[@]} == 0)) && break
        if ((SECONDS >= deadline)); then
            say "killing ${#alive[@]} process(es) that ignored SIGTERM"
            kill -KILL "${alive[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    say "stopped ${#pids[@]} process(es) in $((SECONDS - t0)) s (state and logs kept in $STATE)"
}

cmd_status() {
    export SLURM_CONF="$CONF"
    local d label pid up=1
    for d in "${DAEMONS[@]}"; do
        label=$d
        if [[ $d == node* ]]; then label="slurmd $d"; fi
        if pid=$(daemon_pid "$d"); then
            printf '  %-13s running (pid %s)\n' "$label" "$pid"
        else
            printf '  %-13s not running\n' "$label"
            up=0
        fi
    done
    if ((up)); then
        say "up (state dir $STATE, SLURM_CONF=$CONF)"
        sinfo
        squeue
        return 0
    fi
    say "not (fully) running (state dir $STATE)"
    return 3
}

cmd_env() {
    if [[ ! -f $CONF ]]; then
        echo "devcluster: warning: $CONF does not exist yet; run: bash slurm/devcluster.sh start" >&2
    fi
    echo "export SLURM_CONF=$CONF"
    echo "export PLAYPEN_DEVCLUSTER_DIR=$STATE"
}

(($# == 1)) || usage
case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    -h | --help | help) sed -n '2,/^# Why/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
    *) usage ;;
esac
