// page.js - the chat page of `dflash serve` in headless Chromium (Debian's
// chromium driven by puppeteer-core; run by tests/test_serve_page.sh):
// load it, set a system prompt, send a message, wait for the streamed
// answer, compare the DOM text with the API's answer to the same request,
// check the tok/s and tau line, stop a long reply with the Stop button,
// save a screenshot; any console error or page error fails the test.
'use strict';
const puppeteer = require('puppeteer-core');

const BASE = process.env.BASE;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOT = process.env.SCREENSHOT;
const SYSTEM = 'You are a careful maths tutor.';
const QUESTION = 'Solve for x: 3x + 5 = 20.';

const { check, failures } = require('./tap');

async function main() {
  // what the API answers to the page's request (greedy, page defaults)
  const api = await (await fetch(BASE + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: QUESTION }],
                           max_tokens: 512, chat_template_kwargs: { enable_thinking: false } }) })).json();
  const want = api.choices[0].message.content;

  const browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true, pipe: true, timeout: 60000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check'],
  });
  const errors = [];
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(60000);
    page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
    page.on('pageerror', (e) => errors.push('page error: ' + e.message));
    page.on('requestfailed', (r) => { if (!/ERR_ABORTED/.test(r.failure().errorText)) errors.push('request failed: ' + r.url()); });
    await page.setViewport({ width: 1000, height: 720 });
    const resp = await page.goto(BASE + '/', { waitUntil: 'load' });
    check(resp.status() === 200, 'page loads');
    await page.waitForFunction(() => !/loading/.test(document.getElementById('model').textContent));
    const model = await page.$eval('#model', (e) => e.textContent);
    check(/target/.test(model) && /DFlash draft/.test(model), 'page shows the model and its draft', model);

    await page.type('#system', SYSTEM);
    await page.type('#input', QUESTION);
    await page.click('#send');
    await page.waitForFunction(() => document.body.dataset.state === 'streaming', { timeout: 10000 }).catch(() => {});
    await page.waitForFunction(() => document.body.dataset.state === 'idle' &&
                                     document.querySelector('.msg.assistant .stats'));
    const user = await page.$eval('.msg.user .text', (e) => e.textContent);
    const reply = await page.$eval('.msg.assistant .text', (e) => e.innerText);
    const rendered = await page.$eval('.msg.assistant .text', (e) => !!e.querySelector('p'));
    check(rendered, 'the real reply is rendered through renderMarkdown (p elements)');
    const stats = await page.$eval('.msg.assistant .stats', (e) => e.textContent);
    check(user === QUESTION, 'the question is shown', user);
    check(reply === want && reply.length > 0, 'the streamed answer equals the API answer', JSON.stringify([reply, want]));
    check(/tok\/s/.test(stats) && /tau \d+\.\d\d/.test(stats), 'the reply shows tok/s and tau', stats);
    if (SHOT) await page.screenshot({ path: SHOT });
    const boxes = await page.evaluate(() => {
      const s = document.querySelector('.msg.assistant .stats').getBoundingClientRect();
      const c = document.getElementById('composer').getBoundingClientRect();
      return [s.bottom, c.top];
    });
    check(boxes[0] <= boxes[1], 'the status line is above the composer', boxes);
    const md = await page.evaluate(() => {
      if (typeof renderMarkdown !== 'function') return null;
      const d = document.createElement('div');
      d.append(renderMarkdown('# Head\n\nSome **bold** and *it* and `c<b>`.\n\n- a\n- b\n\n1. x\n2. y\n\n```\n<script>x</script>\n```\n[l](https://e.x/) [j](javascript:alert(1)) <img src=x onerror=alert(1)>'));
      return { h1: !!d.querySelector('h1'), strong: !!d.querySelector('strong'), em: !!d.querySelector('em'),
               code: d.querySelector('p code') && d.querySelector('p code').textContent, ul: d.querySelectorAll('ul li').length,
               ol: d.querySelectorAll('ol li').length, pre: d.querySelector('pre code') && d.querySelector('pre code').textContent,
               links: [...d.querySelectorAll('a')].map((x) => x.getAttribute('href')), bad: !!d.querySelector('script,img,b') };
    });
    check(md && md.h1 && md.strong && md.em && md.code === 'c<b>' && md.ul === 2 && md.ol === 2 &&
          md.pre === '<script>x</script>' && md.links.join() === 'https://e.x/' && !md.bad,
          'renderMarkdown renders Markdown and escapes HTML', JSON.stringify(md));

    // second turn, long, stopped with the button
    await page.$eval('#max-tokens', (e) => { e.value = '4000'; });
    await page.type('#input', 'Write a long story about a robot who learns to paint.');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 2 &&
                                     document.querySelectorAll('.msg.assistant')[1].querySelector('.text').textContent.length > 20);
    const stopEnabled = await page.$eval('#stop', (e) => !e.disabled);
    check(stopEnabled, 'Stop is enabled while a reply streams');
    await page.click('#stop');
    await page.waitForFunction(() => document.body.dataset.state === 'idle', { timeout: 20000 });
    const stopped = await page.$$eval('.msg.assistant .stats', (es) => es[1] && es[1].textContent);
    check(/stopped/.test(stopped || ''), 'Stop ends the reply', stopped);
    const sendEnabled = await page.$eval('#send', (e) => !e.disabled);
    check(sendEnabled, 'Send is enabled again');
    check(errors.length === 0, 'no console errors', errors.join(' | '));
  } finally {
    await browser.close();
  }
}

const timer = setTimeout(() => { console.log('not ok - page.js finished in time'); process.exit(1); }, 170000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - page.js threw: ' + (e && e.stack || e)); process.exit(1); });
