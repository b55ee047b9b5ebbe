// The container's HEALTHCHECK: exit 0 when $POWERSTORE_HEALTH_URL (default
// https://127.0.0.1:7001/healthz) answers 200 within 4 s, else 1. It asks the server in its
// own container over loopback, where the certificate's name cannot match, so the
// certificate is not checked: this says whether the process is alive, nothing more.
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

const url = new URL(process.env.POWERSTORE_HEALTH_URL || 'https://127.0.0.1:7001/healthz');
const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
const req = request(url, { rejectUnauthorized: false, timeout: 4000 }, (res) => {
  res.resume();
  process.exit(res.statusCode === 200 ? 0 : 1);
});
req.on('timeout', () => req.destroy(new Error('timed out')));
req.on('error', (err) => {
  process.stderr.write(`${url.href}: ${err.message}\n`);
  process.exit(1);
});
req.end();
