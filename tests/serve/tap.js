// tests/serve/tap.js - what every serve test prints: one "ok - NAME" or
// "not ok - NAME: DETAIL" line per check; failures() for the exit code.
'use strict';
let failed = 0;
function check(cond, name, detail) {
  if (cond) console.log('ok - ' + name);
  else {
    failed++;
    console.log('not ok - ' + name + (detail !== undefined ? ': ' + String(detail).slice(0, 400) : ''));
  }
}
function failures() { return failed; }
module.exports = { check, failures };
