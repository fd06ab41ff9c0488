"""Submits one Vertex AI CustomJob with Google's client library.

`tandem train --launch vertex_ai` builds the CustomJob request itself and
hands it to this script, run as

    .venv-cloud/bin/python launch/cloud/submit.py < request.json

in its own environment, `.venv-cloud` (`make venv-cloud`, pinned by
requirements-cloud.lock): google-cloud-aiplatform needs protobuf >= 3.20,
while .venv pins protobuf 3.19 for TensorFlow 2.8 and Reverb 0.7, so the two
cannot share one environment. For the same reason this script imports nothing
from `tandem`.

Protocol. Stdin: one JSON object,

    {"api_endpoint": "us-central1-aiplatform.googleapis.com",
     "parent": "projects/P/locations/R",
     "custom_job": {<a CustomJob in Vertex AI's REST JSON: displayName,
                    jobSpec.workerPoolSpecs[...], labels, ...>}}

Stdout, on success: one JSON line,

    {"name": "projects/P/locations/R/customJobs/ID", "state": "JOB_STATE_PENDING",
     "console_url": "https://console.cloud.google.com/vertex-ai/locations/R/training/ID?project=P"}

Exit codes: 0 created; 1 Vertex AI refused the job or could not be reached;
3 sent, but no answer came in time (the job may exist);
2 bad input (stdin that is not such an object, a CustomJob field the API does
not know, an http:// endpoint off loopback) or no credentials. Every failure
is one line on stderr, never a traceback.

The client speaks REST, so what goes on the wire is Vertex AI's REST JSON
(tests/cloud/test_submit.py captures it with a fake service). An endpoint on
loopback (127.0.0.1, ::1, localhost; `http://127.0.0.1:PORT` works) gets
anonymous credentials, since a fake service checks no tokens; any other gets
Application Default Credentials (`gcloud auth application-default login`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
import urllib.parse
import warnings

# Run as a script, this file's folder comes first on sys.path; the modules
# beside it (config, request, ...) are tandem's, and must not shadow a
# library's imports of the same top-level names.
_HERE = os.path.dirname(os.path.realpath(__file__))
if sys.path and os.path.realpath(sys.path[0]) == _HERE:
  del sys.path[0]

# google.api_core warns on import that Python 3.10 gets no further updates;
# stderr is kept for the one line that says why a submission failed.
warnings.filterwarnings(
    'ignore', message='You are using a non-supported Python version',
    category=FutureWarning)

# Only .venv-cloud has the client library. Without it the module still
# imports (tandem's tests import every module of tandem.launch in .venv) and
# main() says which interpreter to use.
try:
  import requests
  from google.api_core import exceptions as api_exceptions
  from google.auth import credentials as auth_credentials
  from google.auth import exceptions as auth_exceptions
  from google.cloud import aiplatform_v1
  from google.protobuf import json_format
except ModuleNotFoundError as e:
  _MISSING: ModuleNotFoundError | None = e
else:
  _MISSING = None

EXIT_OK, EXIT_REFUSED, EXIT_BAD_INPUT = 0, 1, 2
# The request was sent but no answer came: the job may or may not exist.
EXIT_UNKNOWN = 3

# How long one create call may take before it counts as unreachable: the
# client's own default is to wait forever.
TIMEOUT_S = 60.0

_PARENT = re.compile(r'^projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)$')
_JOB_NAME = re.compile(
    r'^projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)'
    r'/customJobs/(?P<job_id>[^/]+)$')
_CONSOLE_URL = ('https://console.cloud.google.com/vertex-ai/locations/{region}'
                '/training/{job_id}?project={project}')


class BadInput(ValueError):
  """Stdin that is not a submission this script can send: exit 2."""


def read_request(text: str) -> tuple[str, str, dict]:
  """(api_endpoint, parent, custom_job) from stdin's JSON object."""
  try:
    request = json.loads(text)
  except json.JSONDecodeError as e:
    raise BadInput(f'stdin is not JSON: {e}') from e
  if not isinstance(request, dict):
    raise BadInput('stdin must be one JSON object with api_endpoint, parent '
                   'and custom_job')
  for key, kind, kind_name in (('api_endpoint', str, 'string'),
                                ('parent', str, 'string'),
                                ('custom_job', dict, 'object')):
    if not isinstance(request.get(key), kind):
      raise BadInput(f'{key}: missing or not a JSON {kind_name}')
  unknown = sorted(set(request) - {'api_endpoint', 'parent', 'custom_job'})
  if unknown:
    raise BadInput(f'{unknown[0]}: not a key of the request (api_endpoint, '
                   'parent, custom_job)')
  if not _PARENT.match(request['parent']):
    raise BadInput(f'parent: {request["parent"]!r} is not projects/<project>'
                   '/locations/<region>')
  return request['api_endpoint'], request['parent'], request['custom_job']


def is_loopback(api_endpoint: str) -> bool:
  """Whether the endpoint's host is this machine: 127.0.0.0/8, ::1 or
  localhost, with or without a scheme and port."""
  with_netloc = api_endpoint if '://' in api_endpoint else '//' + api_endpoint
  host = urllib.parse.urlsplit(with_netloc).hostname or ''
  if host == 'localhost':
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def check_endpoint(api_endpoint: str) -> None:
  """Plain http only to loopback: elsewhere it would carry the user's access
  token unencrypted."""
  if api_endpoint.lower().startswith('http://') and not is_loopback(api_endpoint):
    raise BadInput(f'api_endpoint: {api_endpoint} is plain http off loopback; '
                   'use https:// or a bare host')


def unknown_field(data, descriptor, path: str) -> str | None:
  """The path of the first key in `data` that the message `descriptor` has
  no field for (REST or proto name), or None. json_format would refuse it too,
  but with a message several lines long; this names the field alone."""
  if not isinstance(data, dict) or descriptor.full_name.startswith('google.protobuf.'):
    # A wrong shape is json_format's to report; the well-known types
    # (Duration '3600s', Struct, Any) have JSON forms of their own.
    return None
  fields = {}
  for field in descriptor.fields:
    fields[field.name] = fields[field.json_name] = field
  for key, value in data.items():
    field = fields.get(key)
    if field is None:
      return f'{path}.{key}'
    if field.message_type is None:
      continue
    for item_path, item, item_type in _children(field, value, f'{path}.{key}'):
      found = unknown_field(item, item_type, item_path)
      if found:
        return found
  return None


def _children(field, value, path: str):
  """(path, value, message descriptor) of each message inside a field's value:
  the value itself, each item of a list, each value of a map."""
  if field.message_type.GetOptions().map_entry:
    value_type = field.message_type.fields_by_name['value'].message_type
    if value_type is None or not isinstance(value, dict):
      return []
    return [(f'{path}[{k!r}]', v, value_type) for k, v in value.items()]
  if field.is_repeated:
    if not isinstance(value, list):
      return []
    return [(f'{path}[{i}]', v, field.message_type) for i, v in enumerate(value)]
  return [(path, value, field.message_type)]


def to_custom_job(data: dict) -> aiplatform_v1.CustomJob:
  """The CustomJob proto of its REST JSON; a field the API does not know, or
  a value of the wrong type, is BadInput naming it."""
  found = unknown_field(data, aiplatform_v1.CustomJob.pb().DESCRIPTOR, 'custom_job')
  if found:
    raise BadInput(f'{found}: no such field in a Vertex AI CustomJob')
  try:
    return aiplatform_v1.CustomJob.from_json(json.dumps(data))
  except json_format.ParseError as e:
    # One line: json_format nests "Failed to parse X field: " per level.
    raise BadInput(f'custom_job: {" ".join(str(e).split())}') from e


def make_client(api_endpoint: str) -> aiplatform_v1.JobServiceClient:
  """A REST client of `api_endpoint`: anonymous on loopback, Application
  Default Credentials elsewhere (DefaultCredentialsError when there are none)."""
  credentials = None
  if is_loopback(api_endpoint):
    credentials = auth_credentials.AnonymousCredentials()
  return aiplatform_v1.JobServiceClient(
      transport='rest', credentials=credentials,
      client_options={'api_endpoint': api_endpoint})


def describe(job: aiplatform_v1.CustomJob) -> dict:
  """The stdout line's fields of a created job."""
  match = _JOB_NAME.match(job.name)
  console_url = _CONSOLE_URL.format(**match.groupdict()) if match else None
  # proto-plus hands back a bare int for a state this library does not know.
  state = getattr(job.state, 'name', str(job.state))
  return {'name': job.name, 'state': state, 'console_url': console_url}


def refusal(error: api_exceptions.GoogleAPICallError) -> str:
  """`<code> <STATUS>: <message>` of an API error, from the service's JSON
  error body when there is one (the exception's own message starts with the
  request's method and URL)."""
  code = int(error.code) if error.code is not None else 'unknown'
  body = {}
  if error.response is not None:
    try:
      body = error.response.json().get('error', {})
    except (ValueError, AttributeError):
      body = {}
  message = body.get('message') if isinstance(body, dict) else None
  status = body.get('status') if isinstance(body, dict) else None
  text = f'{status}: {message}' if status and message else (message or error.message)
  return f'{code} {" ".join(str(text).split())}'


def submit(request_text: str) -> dict:
  """Creates the job stdin describes; the stdout line's fields."""
  api_endpoint, parent, data = read_request(request_text)
  check_endpoint(api_endpoint)
  custom_job = to_custom_job(data)
  client = make_client(api_endpoint)
  job = client.create_custom_job(parent=parent, custom_job=custom_job,
                                 timeout=TIMEOUT_S)
  return describe(job)


def main() -> int:
  if _MISSING is not None:
    return fail(f'submit: {_MISSING}; run me with .venv-cloud/bin/python '
                '(`make venv-cloud` builds it)', EXIT_BAD_INPUT)
  try:
    print(json.dumps(submit(sys.stdin.read())), flush=True)
    return EXIT_OK
  except BadInput as e:
    return fail(f'submit: {e}', EXIT_BAD_INPUT)
  except api_exceptions.GoogleAPICallError as e:
    return fail(f'vertex ai refused the job: {refusal(e)}', EXIT_REFUSED)
  except auth_exceptions.DefaultCredentialsError:
    return fail('submit: no Google Cloud credentials found; run `gcloud auth '
                'application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)',
                EXIT_BAD_INPUT)
  except auth_exceptions.RefreshError as e:
    return fail(f'submit: the Google Cloud credentials were refused ({_one_line(e)}); '
                'run `gcloud auth application-default login`', EXIT_BAD_INPUT)
  except requests.exceptions.ReadTimeout as e:
    # The request went out; Vertex AI may have created the job.
    return fail(f'submit: vertex ai did not answer ({_one_line(e)}): the job may '
                'have been created; look with `gcloud ai custom-jobs list` before '
                'sending it again', EXIT_UNKNOWN)
  except (requests.exceptions.RequestException, auth_exceptions.TransportError) as e:
    return fail(f'submit: could not reach vertex ai: {_one_line(e)}', EXIT_REFUSED)
  except Exception as e:  # noqa: BLE001  (the caller reads one line, never a traceback)
    return fail(f'submit: unexpected {type(e).__name__}: {_one_line(e)}', EXIT_REFUSED)


def _one_line(error: BaseException) -> str:
  return ' '.join(str(error).split())


def fail(line: str, code: int) -> int:
  print(line, file=sys.stderr, flush=True)
  return code


if __name__ == '__main__':
  sys.exit(main())
