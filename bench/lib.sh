# Shared by the scripts of bench/ (sourced, not run).
# Expects: set -euo pipefail, the current folder at the repository root, BUILD.

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages only when something is missing. Arguments are commands,
# or COMMAND=PACKAGE when the package is named otherwise (gnuplot=gnuplot-nox).
bench_install() {
  NGINX=$(command -v nginx || true)
  [ -z "$NGINX" ] && [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx
  local missing=()
  [ -z "$NGINX" ] && missing+=(nginx)
  local tool
  for tool in "$@" python3 curl; do
    command -v "${tool%%=*}" >/dev/null || missing+=("${tool#*=}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "bench: installing ${missing[*]}" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
  fi
}

# IDEMGATE_BIN=path measures that binary instead (another commit's build,
# for a side-by-side run) and builds nothing.
bench_build() {
  if [ -n "${IDEMGATE_BIN:-}" ]; then
    IDEMGATE=$IDEMGATE_BIN
  else
    if [ "${BUILD:-1}" = 1 ]; then
      cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DIDEMGATE_TESTS=OFF >/dev/null
      cmake --build build-bench --target idemgate
    fi
    IDEMGATE=$PWD/build-bench/proxy/idemgate
  fi
  [ -x "$IDEMGATE" ] || { echo "bench: $IDEMGATE not built" >&2; exit 1; }
}

# One temporary folder for every config, pid, log and temp path; every
# process started is killed on any exit path. KEEP=1 keeps the folder.
bench_tmp() {
  T=$(mktemp -d -t idemgate-bench.XXXXXX)
  chmod 755 "$T"   # nginx workers drop to an unprivileged user when run as root
  PIDS=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
bench_cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "bench: kept $T" >&2; else rm -rf "$T"; fi
  exit "$rc"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL PROXY PID: poll until a 200 comes back, for at most 30 s
# (PROXY may be empty; PID is the server, to stop early if it died).
wait_http() {
  local url=$1 proxy=$2 pid=$3 deadline=$((SECONDS + 30)) code
  local args=(-s -o /dev/null -w '%{http_code}' --max-time 2)
  [ -n "$proxy" ] && args+=(-x "$proxy")
  while :; do
    code=$(curl "${args[@]}" "$url" || true)
    [ "$code" = 200 ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "bench: process $pid exited while waiting for $url" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "bench: $url not ready after 30 s (last status '$code')" >&2; return 1
    fi
    sleep 0.05
  done
}

# nginx_conf DIR HTTP_BLOCK_TEXT: a one-worker nginx whose every path is in DIR.
nginx_conf() {
  local dir=$1 body=$2
  local user=""
  # As root the workers drop to an unprivileged user; Debian has no group "nobody".
  [ "$(id -u)" = 0 ] && user="user nobody nogroup;"
  mkdir -p "$dir/tmp"
  cat > "$dir/nginx.conf" <<CONF
$user
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_rlimit_nofile ${NGINX_NOFILE:-8192};
events { worker_connections ${NGINX_CONNECTIONS:-4096}; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_timeout 65s;
  keepalive_requests 1000000;
$body
}
CONF
}

# start_nginx DIR: sets LAST_PID (nginx's master, in the foreground).
start_nginx() {
  ${ON_CPUS:+taskset -c "$ON_CPUS"} "$NGINX" -p "$1" -c "$1/nginx.conf" -e "$1/error.log" &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# upstream_conf PORT: the tiny upstream answering "ok\n" with keep-alive.
upstream_conf() {
  printf '  server {\n    listen 127.0.0.1:%s;\n    location / { default_type text/plain; return 200 "ok\\n"; }\n  }\n' "$1"
}

# start_idemgate NAME STDERR [EXTRA_YAML]: idemgate on port 0 with a temp
# config; sets LAST_PID and IG_PORT once its port file appears (30 s deadline).
start_idemgate() {
  local dir=$T/$1 stderr=$2 extra=${3:-}
  mkdir -p "$dir"
  cat > "$dir/config.yaml" <<CONF
listen: 127.0.0.1:0
threads: ${IG_THREADS:-1}
ledger: { url: "sqlite:$dir/ledger.db" }
egress: { allow_hosts: ["*"], allow_loopback: true, allow_private: true }
$extra
CONF
  ${ON_CPUS:+taskset -c "$ON_CPUS"} "$IDEMGATE" serve --config "$dir/config.yaml" --port-file "$dir/port" 2>"$stderr" &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
  local deadline=$((SECONDS + 30))
  until [ -s "$dir/port" ]; do
    if ! kill -0 "$LAST_PID" 2>/dev/null; then
      echo "bench: idemgate ($1) exited early" >&2
      [ -f "$stderr" ] && tail -5 "$stderr" >&2
      return 1
    fi
    [ $SECONDS -ge $deadline ] && { echo "bench: idemgate ($1) wrote no port file in 30 s" >&2; return 1; }
    sleep 0.05
  done
  IG_PORT=$(cat "$dir/port")
}

# rss_mib PID [FIELD]: VmRSS (or VmHWM) in MiB.
rss_mib() { awk -v f="${2:-VmRSS}:" '$1 == f { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# stat_ticks PID [REAPED]: user + system clock ticks of PID so far (all its
# threads), with REAPED (any value) also those of the children it has
# waited for; 0 when the process is gone.
stat_ticks() {
  awk -v reaped="${2:-}" '{ sub(/^.*\) /, ""); print $12 + $13 + (reaped != "" ? $14 + $15 : 0) }' \
    "/proc/$1/stat" 2>/dev/null || echo 0
}

# cpu_ticks PID: the ticks of PID and of its children so far (nginx does its
# work in a worker, a child of the master we start).
cpu_ticks() {
  local pid total=0
  for pid in "$1" $(pgrep -P "$1" || true); do total=$((total + $(stat_ticks "$pid"))); done
  echo "$total"
}

# pg_ticks DATADIR: user + system clock ticks of the PostgreSQL server of
# DATADIR so far: the postmaster, the processes it runs now (backends, WAL
# writer, autovacuum...) and those it has reaped (a backend whose client
# left counts in the postmaster's children's time). A child reaped between
# the two reads would count in neither, with all of its time (a pgbench
# backend: a sixteenth of the run's): the reading is taken again until the
# list of children is the same before and after it.
pg_ticks() {
  local pm pid total before after tries=0
  pm=$(head -1 "$1/postmaster.pid")
  while :; do
    before=$(pgrep -P "$pm" | sort || true)
    total=$(stat_ticks "$pm" reaped)
    for pid in $before; do total=$((total + $(stat_ticks "$pid"))); done
    after=$(pgrep -P "$pm" | sort || true)
    [ "$before" = "$after" ] && break
    tries=$((tries + 1))
    [ "$tries" -lt 50 ] || break
  done
  echo "$total"
}

# us_each TICKS COUNT: microseconds of CPU an item ("-" for no items).
us_each() {
  awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n + 0 > 0) printf "%.1f", t / hz * 1e6 / n; else print "-" }'
}

# json_upstream_conf PORT: the tiny upstream answering {"id":"x"} (application/json)
# with keep-alive to any method and path; X-Seen-Idempotency-Key echoes the
# Idempotency-Key it received, so a bench can check that idemgate injected one.
# It announces its idle timeout (Keep-Alive: timeout=65): idemgate sends a
# guarded write only on a connection whose upstream said how long it stays
# open, so without the header every write would open a fresh connection.
json_upstream_conf() {
  cat <<CONF
  server {
    listen 127.0.0.1:$1;
    keepalive_timeout 65s 65s;
    location / {
      default_type application/json;
      add_header X-Seen-Idempotency-Key \$http_idempotency_key always;
      return 200 '{"id":"x"}';
    }
  }
CONF
}

# start_idemgate_conf NAME STDERR: idemgate with the config the caller wrote to
# $T/NAME/config.yaml (which must say listen: 127.0.0.1:0); sets LAST_PID and
# IG_PORT once its port file appears (30 s deadline), like start_idemgate.
start_idemgate_conf() {
  local dir=$T/$1 stderr=$2
  rm -f "$dir/port"
  ${ON_CPUS:+taskset -c "$ON_CPUS"} "$IDEMGATE" serve --config "$dir/config.yaml" --port-file "$dir/port" 2>"$stderr" &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
  local deadline=$((SECONDS + 30))
  until [ -s "$dir/port" ]; do
    if ! kill -0 "$LAST_PID" 2>/dev/null; then
      echo "bench: idemgate ($1) exited early" >&2
      [ -f "$stderr" ] && tail -5 "$stderr" >&2
      return 1
    fi
    [ $SECONDS -ge $deadline ] && { echo "bench: idemgate ($1) wrote no port file in 30 s" >&2; return 1; }
    sleep 0.05
  done
  IG_PORT=$(cat "$dir/port")
}

# stop_pid PID [SECONDS]: SIGTERM, wait up to SECONDS (default 35), then SIGKILL.
stop_pid() {
  local pid=$1 deadline=$((SECONDS + ${2:-35}))
  kill "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then kill -9 "$pid" 2>/dev/null || true; break; fi
    sleep 0.05
  done
  wait "$pid" 2>/dev/null || true
}
