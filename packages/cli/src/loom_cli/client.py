"""HTTP client for the control plane's Function URL, SigV4-signed for real deployments."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class CliError(Exception):
    """Something the user can fix; ``exit_code`` says what kind."""

    def __init__(self, message: str, exit_code: int = 4):
        super().__init__(message)
        self.exit_code = exit_code


class ApiError(CliError):
    """The API answered with an error document ``{"error", "message"}``."""

    def __init__(self, status: int, code: str, message: str, body: dict | None = None):
        super().__init__(f"{code} (HTTP {status}): {message}", exit_code=3)
        self.status, self.code, self.api_message = status, code, message
        self.body = body if body is not None else {"error": code, "message": message}
        """The whole error document (``problems``, ``execution_status`` when the API adds them)."""


@dataclass
class Client:
    url: str
    sign: bool
    region: str | None = None
    timeout_s: float = 30.0
    _credentials: Any = None

    @classmethod
    def create(cls, url: str, sign: bool | None = None, region: str | None = None, profile: str | None = None) -> Client:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise CliError(f"--url {url!r} is not an http(s) URL; pass the control plane's Function URL", 2)
        if sign is None:
            sign = parsed.hostname not in LOOPBACK_HOSTS
        client = cls(url=url.rstrip("/"), sign=sign, region=region)
        if sign:
            client._load_credentials(parsed.hostname or "", profile)
        return client

    def _load_credentials(self, host: str, profile: str | None) -> None:
        import botocore.session

        session = botocore.session.Session(profile=profile)
        credentials = session.get_credentials()
        if credentials is None:
            raise CliError(
                "no AWS credentials found for signing the request (the Function URL uses AWS_IAM auth); "
                "configure them as for the AWS CLI (AWS_PROFILE, aws configure, SSO, instance role)", 2)
        self._credentials = credentials
        # Function URL hosts look like <id>.lambda-url.<region>.on.aws
        parts = host.split(".")
        inferred = parts[2] if len(parts) > 3 and parts[1] == "lambda-url" else None
        self.region = self.region or inferred or session.get_config_variable("region")
        if not self.region:
            raise CliError("cannot tell the AWS region for signing; pass --region or set AWS_REGION", 2)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
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
            payload = _json(exc.read(), exc.code, strict=False)
            if isinstance(payload, dict) and "error" in payload:
                raise ApiError(exc.code, str(payload["error"]), str(payload.get("message", "")), payload) from None
            if exc.code == 403 and self.sign:
                raise ApiError(403, "forbidden", "the Function URL refused the signed request: check that your "
                               "identity has lambda:InvokeFunctionUrl on the control plane") from None
            raise ApiError(exc.code, "http_error", f"{exc.reason}") from None
        except urllib.error.URLError as exc:
            raise CliError(f"cannot reach {self.url}: {exc.reason}. Is the stack up (make up) and the URL right?") from None
        except TimeoutError:
            raise CliError(f"{method} {url} timed out after {self.timeout_s:g} s") from None

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
            raise CliError(f"the server answered HTTP {status} with a body that is not JSON: {raw[:200]!r}") from None
        return None
