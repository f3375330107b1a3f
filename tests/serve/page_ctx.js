// page_ctx.js - the chat page against a server with a small context (run by
// tests/test_serve_page.sh with --ctx-size 256): a message too long alone is
// refused and the conversation kept; the oldest exchanges are dropped, and
// said so, when the conversation no longer fits; a reply cut by the full
// context is labelled so, not "cut at max tokens".
'use strict';
const puppeteer = require('puppeteer-core');
const BASE = process.env.BASE;
const { check, failures } = require('./tap');
async function turn(page, text, n) {
  await page.type('#input', text);
  await page.click('#send');
  await page.waitForFunction((k) => document.body.dataset.state === 'idle' &&
    document.querySelectorAll('.msg.assistant').length === k &&
    document.querySelectorAll('.msg.assistant')[k - 1].querySelector('.stats'), {}, n);
  return page.$$eval('.msg.assistant .stats', (es) => es[es.length - 1].textContent);
}
async function main() {
  const browser = await puppeteer.launch({ executablePath: process.env.CHROMIUM, headless: true, pipe: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(60000);
    await page.goto(BASE + '/', { waitUntil: 'load' });
    await page.waitForFunction(() => /context 256/.test(document.getElementById('model').textContent));
    await page.$eval('#max-tokens', (e) => { e.value = '1000'; });
    const stats = [];
    let n = 0, note = '';
    while (n < 8 && !note) {
      stats.push(await turn(page, 'Write a long story about a robot, part ' + (n + 1) + '.', ++n));
      note = await page.$eval('.msg.note.trimmed', (e) => e.textContent).catch(() => '');
    }
    const cut = stats.filter((x) => /context is full/.test(x));
    check(cut.length > 0 && !stats.some((x) => /max tokens/.test(x)), 'a reply cut by the full context says so', stats.join(' | '));
    check(/dropped the oldest exchange/.test(note), 'the page drops the oldest exchange and says so', note);
    check(!/^error/.test(stats[stats.length - 1]), 'the message after the trim is answered', stats[stats.length - 1]);
    const before = await page.evaluate(() => turns.length);
    const s3 = await turn(page, 'word '.repeat(400), n + 1);
    check(/too long/.test(s3), 'a message too long alone is refused', s3);
    const kept = await page.evaluate(() => turns.length);
    check(kept === before && kept > 0, 'the conversation is kept after a refusal', [before, kept]);
  } finally { await browser.close(); }
}
const timer = setTimeout(() => { console.log('not ok - page_ctx.js finished in time'); process.exit(1); }, 170000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
  (e) => { clearTimeout(timer); console.log('not ok - page_ctx.js threw: ' + (e && e.stack || e)); process.exit(1); });
