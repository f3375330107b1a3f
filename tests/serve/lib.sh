# lib.sh - shared by tests/test_serve*.sh (sourced, POSIX sh): counters, the
# node + npm packages the tests use, and starting / stopping `dflash serve`
# on a free loopback port. Everything is bounded in time.
BIN=${DFLASH_BIN:-./dflash}
ROOT=${DFLASH_ROOT:-.}
cd "$ROOT" || exit 1
ROOT=$PWD
# the npm packages, pinned; installed once into build/node (ignored by git)
NODE_DIR=${DFLASH_NODE_DIR:-$ROOT/build/node}
NODE_PKGS="openai@4.104.0 puppeteer-core@24.43.1"
T=$(mktemp -d /tmp/dflash-serve-XXXXXX)
SV_PID=""
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; }
cleanup() {
    [ -n "$SV_PID" ] && kill -KILL "$SV_PID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

# apt-get install PACKAGES (root only); returns non-zero on failure
apt_install() {
    [ "$(id -u)" = 0 ] || { echo "need $*: run as root or apt-get install $*" >&2; return 1; }
    echo "installing $* (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@") >"$T/apt.log" 2>&1 || {
        tail -5 "$T/apt.log" >&2; return 1; }
}

# node, npm and the pinned packages; fails loudly when they cannot be had
need_node() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm || return 1
    for p in $NODE_PKGS; do
        name=${p%@*} ver=${p##*@}
        if ! grep -q "\"version\": \"$ver\"" "$NODE_DIR/node_modules/$name/package.json" 2>/dev/null; then
            mkdir -p "$NODE_DIR"
            echo "installing $NODE_PKGS into $NODE_DIR (npm)" >&2
            timeout 300 npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error $NODE_PKGS >&2 || return 1
            break
        fi
    done
    export NODE_PATH="$NODE_DIR/node_modules"
}

# Run a node test script with the packages; its "ok"/"not ok" lines count.
run_node() {
    secs=$1; shift
    timeout "$secs" node "$@" >"$T/node.out" 2>&1
    rc=$?
    cat "$T/node.out"
    np=$(grep -c '^ok - ' "$T/node.out") nf=$(grep -c '^not ok - ' "$T/node.out")
    pass=$((pass + np)) fail=$((fail + nf))
    if [ "$rc" -ne 0 ] && [ "$nf" -eq 0 ]; then bad "node $1 exited $rc"; fi
    [ "$rc" -eq 124 ] && echo "   (timed out after $secs s)"
    return 0
}

# start_server ARGS...: dflash serve on 127.0.0.1, a free port; sets PORT, BASE
start_server() {
    # emptied here first: the background child truncates it only when it
    # runs, and until then the loop below could read the last server's port
    : >"$T/server.log"
    "$BIN" serve --host 127.0.0.1 --port 0 "$@" >"$T/server.log" 2>&1 &
    SV_PID=$!
    PORT=""
    i=0
    while [ $i -lt 600 ]; do   # 60 s: ASan builds load slower
        PORT=$(sed -nE 's/.*listening on http:\/\/[^:]+:([0-9]+).*/\1/p' "$T/server.log")
        [ -n "$PORT" ] && break
        kill -0 "$SV_PID" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    if [ -z "$PORT" ]; then
        bad "server started"; sed 's/^/    server: /' "$T/server.log" | tail -20; SV_PID=""; return 1
    fi
    BASE="http://127.0.0.1:$PORT"
    export BASE
    ok "server started on port $PORT"
}

# stop_server: SIGTERM, then it must exit 0 within 30 s with a clean log
stop_server() {
    [ -n "$SV_PID" ] || return 0
    kill -TERM "$SV_PID" 2>/dev/null
    i=0
    while kill -0 "$SV_PID" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$SV_PID" 2>/dev/null; then
        bad "SIGTERM: server exits within 30 s"; kill -KILL "$SV_PID"; wait "$SV_PID" 2>/dev/null; SV_PID=""; return
    fi
    wait "$SV_PID"
    rc=$?
    SV_PID=""
    [ "$rc" -eq 0 ] && ok "SIGTERM: graceful exit 0" || bad "SIGTERM: graceful exit 0 (exit $rc)"
    grep -q "dflash serve: stopped" "$T/server.log" && ok "server log: stopped" || bad "server log: stopped"
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|Segmentation' "$T/server.log"; then
        bad "server log: no sanitizer report"; grep -A30 -E 'Sanitizer|runtime error' "$T/server.log" | head -60
    else
        ok "server log: no sanitizer report"
    fi
}
