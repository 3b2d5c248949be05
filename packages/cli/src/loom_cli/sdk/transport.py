"""HTTP to the control plane's Function URL: JSON in and out, SigV4-signed with botocore for a deployment
(the Function URL uses ``AWS_IAM`` auth), unsigned to the local stack on loopback."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .errors import BAD_RESPONSE, CONFIGURATION, INVALID_ARGUMENT, UNREACHABLE, LoomError

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@dataclass
class Transport:
    """One control plane: ``request(method, path, body) -> (status, document)``; a refusal raises
    :class:`LoomError`. ``Transport.create(url)`` signs unless the URL is on loopback."""

    url: str
    sign: bool
    region: str | None = None
    timeout_s: float = 30.0
    _credentials: Any = field(default=None, repr=False)

    @classmethod
    def create(cls, url: str, sign: bool | None = None, region: str | None = None, profile: str | None = None,
               timeout_s: float = 30.0) -> Transport:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LoomError(CONFIGURATION, f"{url!r} is not an http(s) URL; pass the control plane's Function URL")
        if parsed.query or parsed.fragment or url.rstrip().endswith(("?", "#")):
            raise LoomError(CONFIGURATION, f"{url!r} carries a query or a fragment; pass the control plane's URL alone "
                                           f"({parsed.scheme}://{parsed.netloc}{parsed.path})")
        if sign is None:
            sign = parsed.hostname not in LOOPBACK_HOSTS
        transport = cls(url=url.rstrip("/"), sign=sign, region=region, timeout_s=timeout_s)
        if sign:
            transport._load_credentials(parsed.hostname or "", profile)
        return transport

    def _load_credentials(self, host: str, profile: str | None) -> None:
        import botocore.exceptions
        import botocore.session

        try:
            session = botocore.session.Session(profile=profile)
            credentials = session.get_credentials()
        except botocore.exceptions.ProfileNotFound as exc:
            raise LoomError(CONFIGURATION, f"{exc}; name a profile from your AWS config") from None
        if credentials is None:
            raise LoomError(CONFIGURATION, "no AWS credentials found for signing the request (the Function URL uses "
                                           "AWS_IAM auth); configure them as for the AWS CLI (AWS_PROFILE, aws "
                                           "configure, SSO, instance role)")
        self._credentials = credentials
        # Function URL hosts look like <id>.lambda-url.<region>.on.aws
        parts = host.split(".")
        inferred = parts[2] if len(parts) > 3 and parts[1] == "lambda-url" else None
        self.region = self.region or inferred or session.get_config_variable("region")
        if not self.region:
            raise LoomError(CONFIGURATION, "cannot tell the AWS region for signing; pass --region (region=) or set "
                                           "AWS_REGION")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else _encoded(body)
        headers = {"accept": "application/json"}
        if data is not None:
            headers["content-type"] = "application/json"
        url = self.url + path
        if self.sign:
            headers = self._signed_headers(method, url, data, headers)
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, _json(resp.read(), resp.status)
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read()
            except (ConnectionError, http.client.HTTPException, TimeoutError) as broken:  # the answer cut off
                raise LoomError(UNREACHABLE, f"{method} {url}: HTTP {exc.code} came, then the connection broke before "
                                             f"its body ({type(broken).__name__}: {broken}); the request may or may not "
                                             "have been applied: read the execution before retrying a write",
                                status=exc.code) from None
            payload = _json(body, exc.code, strict=False)
            if isinstance(payload, dict) and "error" in payload:
                raise LoomError.from_document(exc.code, payload) from None
            if exc.code == 403 and self.sign:
                raise LoomError("forbidden", "the Function URL refused the signed request: check that your identity "
                                "has lambda:InvokeFunctionUrl on the control plane", status=403) from None
            raise LoomError("http_error", f"{exc.reason}", status=exc.code) from None
        except urllib.error.URLError as exc:
            raise LoomError(UNREACHABLE, f"cannot reach {self.url}: {exc.reason}. Is Loom running there (`loom dev`, "
                                         "or `make up` for the local AWS stack) and the URL right?") from None
        except TimeoutError:
            raise LoomError(UNREACHABLE, f"{method} {url} timed out after {self.timeout_s:g} s") from None
        except (ConnectionError, http.client.HTTPException) as exc:  # the server went away mid-request
            raise LoomError(UNREACHABLE, f"{method} {url}: the connection broke before an answer "
                                         f"({type(exc).__name__}: {exc}); the request may or may not have been "
                                         "applied: read the execution before retrying a write") from None

    def _signed_headers(self, method: str, url: str, data: bytes | None, headers: dict) -> dict:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=data or b"", headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), "lambda", self.region).add_auth(request)
        return dict(request.headers.items())


def _json(raw: bytes, status: int, strict: bool = True) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        if strict:
            raise LoomError(BAD_RESPONSE, f"the server answered HTTP {status} with a body that is not JSON: "
                                          f"{raw[:200]!r}") from None
        return None


def _encoded(body: Any) -> bytes:
    """The request body as JSON, or an ``invalid_argument`` naming what JSON cannot carry, before any request."""
    try:
        text = json.dumps(body, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # a set, a datetime, bytes, an object; NaN or Infinity
        raise LoomError(INVALID_ARGUMENT, f"the request cannot be sent as JSON ({exc}): send JSON types only "
                                          "(dict, list, str, int, float, bool, None; a datetime as .isoformat(), a set "
                                          "as a list, no NaN or Infinity)") from None
    try:
        # UTF-8 as it is: the API's 256 KB limit counts these bytes, and an escaped é (\u00e9) is six of them
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8: escaped, as JSON allows, for the API to judge
        return json.dumps(body, allow_nan=False).encode()
