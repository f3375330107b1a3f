#!/bin/sh
# test_serve_page.sh - the chat page of `dflash serve` in headless Chromium
# (Debian's chromium, installed here if missing; driven by puppeteer-core,
# tests/serve/page.js): load, send a message, wait for the streamed answer,
# check the DOM text against the API, tok/s and tau shown, Stop works, no
# console errors; the screenshot goes to build/serve-page.png. Without a
# Chromium the test fails: it never passes silently.
. "$(dirname "$0")/serve/lib.sh"

CHROMIUM=$(command -v chromium || command -v chromium-browser)
if [ -z "$CHROMIUM" ]; then
    apt_install chromium && CHROMIUM=$(command -v chromium)
fi
if [ -z "$CHROMIUM" ]; then
    bad "Chromium is installed (apt-get install chromium failed)"
    echo "test_serve_page: $pass passed, $fail failed"; exit 1
fi
ok "chromium: $("$CHROMIUM" --version 2>/dev/null | head -1)"
if ! need_node; then
    bad "node, npm and the npm packages ($NODE_PKGS) are available"
    echo "test_serve_page: $pass passed, $fail failed"; exit 1
fi
mkdir -p "$ROOT/build"
export CHROMIUM SCREENSHOT="${DFLASH_SCREENSHOT:-$ROOT/build/serve-page.png}"
if start_server -m models/demo/target --draft models/demo/draft; then
    run_node 180 tests/serve/page.js
    [ -s "$SCREENSHOT" ] && ok "screenshot saved ($SCREENSHOT)" || bad "screenshot saved"
    stop_server
fi
if start_server -m models/demo/target --draft models/demo/draft --ctx-size 256; then
    run_node 180 tests/serve/page_ctx.js
    stop_server
fi
echo "test_serve_page: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
