"""A small OpenID Connect identity provider on 127.0.0.1 for tests: discovery, JWKS, an
authorisation endpoint that signs in whoever `account` names at once (no login form), and a
token endpoint that checks the client's secret, the redirect URI and the PKCE verifier and
answers with an RS256 ID token signed with joserfc (Authlib's JOSE library; `authlib.jose`
now warns that it is deprecated in its favour).

It can be told to misbehave, one way per test (`misbehave`): a token from another issuer,
for another audience, signed with a key it does not publish, already expired, or with a
nonce from another sign-in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from joserfc import jwt
from joserfc.jwk import RSAKey

__all__ = ["Account", "LocalIdentityProvider", "Misbehaviour"]

Misbehaviour = Literal["wrong_issuer", "wrong_audience", "bad_signature", "expired", "wrong_nonce"]
TOKEN_LIFETIME_SECONDS = 300  # seconds an ID token it issues is valid


@dataclass
class Account:
    email: str
    email_verified: bool = True
    subject: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass(frozen=True)
class _Grant:
    client_id: str
    redirect_uri: str
    code_challenge: str
    nonce: str
    account: Account


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class LocalIdentityProvider:
    def __init__(self, *, client_id: str = "tocsin-test", client_secret: str = "idp-client-secret"):
        self.client_id = client_id
        self.client_secret = client_secret
        self.account = Account("someone@example.com")
        self.misbehave: Misbehaviour | None = None
        self.key = RSAKey.generate_key(2048, {"kid": "idp-key-1"})
        # Same kid, another key: what a forger without the provider's key would sign with.
        self.forged_key = RSAKey.generate_key(2048, {"kid": "idp-key-1"})
        self.grants: dict[str, _Grant] = {}
        self.token_requests: list[dict[str, str]] = []
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/.well-known/openid-configuration":
                    self._json(200, provider.discovery())
                elif url.path == "/jwks":
                    self._json(200, {"keys": [provider.key.as_dict(private=False)]})
                elif url.path == "/authorize":
                    self._authorize(query)
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
                form = {k: v[0] for k, v in parse_qs(body).items()}
                if urlsplit(self.path).path != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                status, answer = provider.token(form, self.headers.get("authorization", ""))
                self._json(status, answer)

            def _authorize(self, query: dict[str, str]) -> None:
                if (query.get("client_id") != provider.client_id or query.get("response_type") != "code"
                        or query.get("code_challenge_method") != "S256" or not query.get("code_challenge")
                        or not query.get("nonce") or "openid" not in query.get("scope", "").split()):
                    self._json(400, {"error": "invalid_request"})
                    return
                code = secrets.token_urlsafe(16)
                with provider.lock:
                    provider.grants[code] = _Grant(query["client_id"], query["redirect_uri"],
                                                   query["code_challenge"], query["nonce"],
                                                   provider.account)
                back = query["redirect_uri"] + "?" + urlencode({"code": code,
                                                                "state": query.get("state", "")})
                self.send_response(302)
                self.send_header("location", back)
                self.send_header("content-length", "0")
                self.end_headers()

            def _json(self, status: int, document: dict[str, Any]) -> None:
                raw = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def discovery(self) -> dict[str, Any]:
        return {"issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"]}

    def _client_authenticated(self, form: dict[str, str], authorization: str) -> bool:
        if authorization.lower().startswith("basic "):
            pair = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = pair.partition(":")
            return unquote(client_id) == self.client_id and unquote(secret) == self.client_secret
        return form.get("client_id") == self.client_id and form.get("client_secret") == self.client_secret

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        self.token_requests.append(form)
        if not self._client_authenticated(form, authorization):
            return 401, {"error": "invalid_client"}
        with self.lock:
            grant = self.grants.pop(form.get("code", ""), None)  # a code works once
        if grant is None or form.get("grant_type") != "authorization_code":
            return 400, {"error": "invalid_grant"}
        if form.get("redirect_uri") != grant.redirect_uri:
            return 400, {"error": "invalid_grant", "error_description": "redirect_uri"}
        if _challenge(form.get("code_verifier", "")) != grant.code_challenge:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verifier"}
        return 200, {"access_token": secrets.token_urlsafe(16), "token_type": "Bearer",
                     "expires_in": TOKEN_LIFETIME_SECONDS, "id_token": self.id_token(grant)}

    def id_token(self, grant: _Grant) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer, "aud": grant.client_id, "sub": grant.account.subject,
            "email": grant.account.email, "email_verified": grant.account.email_verified,
            "nonce": grant.nonce, "iat": now, "exp": now + TOKEN_LIFETIME_SECONDS,
        }
        key = self.key
        if self.misbehave == "wrong_issuer":
            claims["iss"] = "https://someone-else.example"
        elif self.misbehave == "wrong_audience":
            claims["aud"] = "another-application"
        elif self.misbehave == "bad_signature":
            key = self.forged_key
        elif self.misbehave == "expired":
            claims["iat"], claims["exp"] = now - 7200, now - 3600
        elif self.misbehave == "wrong_nonce":
            claims["nonce"] = secrets.token_urlsafe(16)
        return jwt.encode({"alg": "RS256", "kid": "idp-key-1"}, claims, key)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
