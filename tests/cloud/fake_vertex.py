"""A fake Vertex AI REST service on loopback, for tests of what the real
client library sends.

    with fake_vertex.serve() as vertex:
      ...  # point a client at vertex.endpoint ('http://127.0.0.1:PORT')
      vertex.requests  # what it received: method, path, query, headers, body

It answers `POST /v1/projects/{p}/locations/{r}/customJobs` as Vertex AI
does: the posted CustomJob back with a `name`, `state` JOB_STATE_PENDING and
a `createTime`; with `fail_with=(code, status, message)` it refuses every
request with Google's JSON error body instead. Other paths get 404. It only
ever listens on 127.0.0.1 and checks no credentials.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import itertools
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator

# The only address the fake binds: a test service must never be reachable
# from outside this machine.
LOOPBACK = '127.0.0.1'

_CREATE_PATH = re.compile(
    r'^/v1/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/customJobs$')

# Job ids as Vertex AI writes them: long strings of digits.
_FIRST_JOB_ID = 1234567890123456789


class FakeVertex:
  """What a test reads of the fake: its endpoint and the requests it got."""

  def __init__(self, endpoint: str, fail_with: tuple[int, str, str] | None):
    self.endpoint = endpoint
    self.fail_with = fail_with
    self.requests: list[dict] = []
    self._job_ids = itertools.count(_FIRST_JOB_ID)
    self._lock = threading.Lock()

  def record(self, request: dict) -> None:
    with self._lock:
      self.requests.append(request)

  def next_job_id(self) -> int:
    with self._lock:
      return next(self._job_ids)


def _error_body(code: int, status: str, message: str) -> dict:
  """Google's JSON error body (google.rpc.Status over HTTP)."""
  return {'error': {'code': code, 'message': message, 'status': status}}


def _handler_for(vertex: FakeVertex) -> type[http.server.BaseHTTPRequestHandler]:
  """A request handler class bound to `vertex` (http.server makes one
  handler object per request from a class)."""

  class Handler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.1 keeps the client's connection open between requests, as the
    # real service does; every answer carries Content-Length.
    protocol_version = 'HTTP/1.1'

    def do_POST(self):  # http.server's name for the handler
      request = self._read()
      if vertex.fail_with is not None:
        code, status, message = vertex.fail_with
        self._answer(code, _error_body(code, status, message))
        return
      match = _CREATE_PATH.match(request['path'])
      if match is None:
        self._not_found(request['path'])
        return
      if not isinstance(request['body'], dict):
        self._answer(400, _error_body(
            400, 'INVALID_ARGUMENT', 'the request body is not a JSON object'))
        return
      self._answer(200, self._created(match, request['body']))

    def do_GET(self):  # http.server's name for the handler
      request = self._read()
      self._not_found(request['path'])

    def _created(self, match: re.Match, job: dict) -> dict:
      """The posted job as Vertex AI answers a create: named, pending."""
      name = (f'projects/{match["project"]}/locations/{match["region"]}'
              f'/customJobs/{vertex.next_job_id()}')
      now = datetime.datetime.now(datetime.timezone.utc)
      return {**job, 'name': name, 'state': 'JOB_STATE_PENDING',
              'createTime': now.isoformat(timespec='microseconds')
              .replace('+00:00', 'Z')}

    def _read(self) -> dict:
      """Records this request: method, path, query, headers, JSON body
      (None when empty; the raw text when it is not JSON)."""
      url = urllib.parse.urlsplit(self.path)
      length = int(self.headers.get('Content-Length') or 0)
      raw = self.rfile.read(length).decode('utf-8') if length else ''
      try:
        body = json.loads(raw) if raw else None
      except json.JSONDecodeError:
        body = raw
      request = {
          'method': self.command,
          'path': url.path,
          'query': urllib.parse.parse_qs(url.query),
          'headers': {k.lower(): v for k, v in self.headers.items()},
          'body': body,
      }
      vertex.record(request)
      return request

    def _not_found(self, path: str) -> None:
      self._answer(404, _error_body(404, 'NOT_FOUND', f'no such resource: {path}'))

    def _answer(self, code: int, body: dict) -> None:
      data = json.dumps(body).encode('utf-8')
      self.send_response(code)
      self.send_header('Content-Type', 'application/json; charset=UTF-8')
      self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def log_message(self, format, *args):
      """Quiet: tests read `vertex.requests`, not a log on stderr."""

  return Handler


@contextlib.contextmanager
def serve(fail_with: tuple[int, str, str] | None = None) -> Iterator[FakeVertex]:
  """Runs the fake on 127.0.0.1 at a free port in a daemon thread for the
  block; `fail_with=(code, status, message)` refuses every request."""
  vertex = FakeVertex('', fail_with)
  server = http.server.ThreadingHTTPServer((LOOPBACK, 0), _handler_for(vertex))
  server.daemon_threads = True
  host, port = server.server_address[:2]
  assert host == LOOPBACK, f'the fake bound {host}, not loopback'
  vertex.endpoint = f'http://{host}:{port}'
  thread = threading.Thread(target=server.serve_forever, name='fake-vertex',
                            daemon=True)
  thread.start()
  try:
    yield vertex
  finally:
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
