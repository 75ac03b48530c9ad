// A webhook receiver for the tests: it verifies every delivery with the
// Standard Webhooks reference library (npm standardwebhooks), not with the
// control plane's own code, records what it got and answers by a plan the
// test sets.
//
//   node receiver.js MODULE_DIR    listens on 127.0.0.1 (a free port) and
//                                  prints "listening PORT"
//
// Control (JSON, under /_control/):
//   POST secrets {"secrets": ["whsec_..."]}   the secrets to verify with
//   POST plan    {"answers": [503, 410], "then": 200, "retryAfter": "7", "hang": 0}
//                answers in order, then "then"; "hang" requests get no answer
//   POST offset  {"ms": N}   the receiver's clock runs N ms ahead of real
//                time (the tests' injected clock), for the timestamp check
//   GET  received            what it got, in order
'use strict';
const http = require('http');
const path = require('path');
const { Webhook } = require(path.join(process.argv[2], 'standardwebhooks'));

let secrets = [];
let plan = { answers: [], then: 200, retryAfter: '', hang: 0 };
let offset = 0;
const received = [];
const realNow = Date.now;
Date.now = () => realNow() + offset;

function json(res, status, v) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(v));
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    if (req.url.startsWith('/_control/')) {
      const what = req.url.slice('/_control/'.length);
      if (req.method === 'GET' && what === 'received') return json(res, 200, received);
      const v = body ? JSON.parse(body) : {};
      if (what === 'secrets') secrets = v.secrets || [];
      else if (what === 'plan') { plan = Object.assign({ then: 200, retryAfter: '', hang: 0 }, v); plan.answers = v.answers || []; }
      else if (what === 'offset') offset = v.ms || 0;
      else return json(res, 404, { error: 'unknown control ' + what });
      return json(res, 200, { ok: true });
    }
    const headers = {
      'webhook-id': req.headers['webhook-id'] || '',
      'webhook-timestamp': req.headers['webhook-timestamp'] || '',
      'webhook-signature': req.headers['webhook-signature'] || '',
    };
    // Which of the secrets the reference library accepts the delivery with.
    const verified = secrets.map((s) => {
      try {
        new Webhook(s).verify(body, headers);
        return 'ok';
      } catch (e) {
        return String(e && e.message);
      }
    });
    const entry = { path: req.url, id: headers['webhook-id'], timestamp: headers['webhook-timestamp'],
      signature: headers['webhook-signature'], body, verified, answered: 0 };
    received.push(entry);
    if (plan.hang > 0) {
      plan.hang--;
      entry.answered = -1;
      return; // no answer: the sender's timeout, or its death, ends it
    }
    const status = plan.answers.length > 0 ? plan.answers.shift() : plan.then;
    entry.answered = status;
    const h = { 'content-type': 'text/plain' };
    if (plan.retryAfter) h['retry-after'] = plan.retryAfter;
    if (status >= 300 && status < 400) h.location = 'http://127.0.0.1:1/elsewhere';
    res.writeHead(status, h);
    res.end('answer ' + status + ' ' + 'x'.repeat(2000));
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write('listening ' + server.address().port + '\n');
});
