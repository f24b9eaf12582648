"""Secrets are never printed (issue 28 item 11; docs/security.md "Secrets never appear ...").

* a token provider object whose own ``repr`` shows its secret (a ``functools.partial`` of a function taking the
  client secret, a dataclass holding it) appears neither in ``repr(config)`` nor in ``config.as_dict()``;
* the command line does not echo a ``.properties`` line (or a ``-X`` argument) that holds only a secret when it
  refuses it as an unknown setting: it names the file and the line;
* the OIDC client secret, in any of its spellings, prints as ``[hidden]``.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from kproducer import cli
from kproducer.config import HIDDEN, Password, ProducerConfig
from kproducer.errors import ConfigError

SECRET = "Zq9-client-secret-never-shown"
BASE: Dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": "OAUTHBEARER"}


def fetch_token(client_id: str, client_secret: str) -> Tuple[str, float]:  # pragma: no cover - never called
    return "token", 0.0


@dataclass
class ClientCredentials:
    client_id: str
    client_secret: str

    def token(self) -> str:  # pragma: no cover - never called
        return "token"


def _printed(cfg: ProducerConfig) -> str:
    values = cfg.as_dict()
    return "\n".join([repr(cfg), str(cfg), repr(values), str(values), repr(cfg.sasl_login),
                      *(f"{k}={v}" for k, v in values.items())])


@pytest.mark.parametrize("provider", [functools.partial(fetch_token, "my-client", SECRET),
                                      ClientCredentials("my-client", SECRET)],
                         ids=["partial", "dataclass"])
def test_a_token_provider_repr_with_a_secret_is_not_printed(provider: Any) -> None:
    assert SECRET in repr(provider)  # the premise: its own repr shows the secret
    cfg = ProducerConfig(BASE, sasl_oauth_token_provider=provider)
    assert SECRET not in _printed(cfg)
    shown = cfg.as_dict()["sasl.oauth.token.provider"]
    assert HIDDEN in repr(shown) and type(provider).__name__ in repr(shown)
    # the provider itself is still what the producer uses
    assert cfg.sasl_oauth_token_provider is provider
    assert cfg.sasl_login is not None and cfg.sasl_login.token_provider is provider


def test_as_dict_still_compares_equal_for_the_same_provider() -> None:
    provider = ClientCredentials("my-client", SECRET)
    assert ProducerConfig(BASE, sasl_oauth_token_provider=provider).as_dict() == \
        ProducerConfig(BASE, sasl_oauth_token_provider=provider).as_dict()


# -- the command line --------------------------------------------------------------------------------


def _cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(["produce", "-b", "127.0.0.1:1", "-t", "t", *argv]) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert SECRET not in out
    return err


@pytest.mark.parametrize("line", [SECRET, f"  {SECRET}", f"{SECRET}=", f'"{SECRET}";',
                                  f"{SECRET}==", "c2VjcmV0LXNlY3JldA=="])
def test_a_properties_line_holding_only_a_secret_is_not_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               line: str) -> None:
    """The classic mistake: a continuation line of sasl.jaas.config, or a pasted secret, on a line of its own."""
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\n"
                     "sasl.mechanism=PLAIN\n"
                     f"{line}\n", encoding="utf-8")
    err = _cli_error(capsys, "--command-config", str(props))
    secret = line.strip().strip('";=')
    assert secret not in err
    assert f"{props}:3" in err  # the file and the line
    assert "not shown" in err


def test_an_unknown_setting_name_in_a_properties_file_is_still_named(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# settings\nlinger.mss=5\n", encoding="utf-8")
    err = _cli_error(capsys, "--command-config", str(props))
    assert "linger.mss" in err and "linger.ms" in err and f"{props}:2" in err


def test_a_minus_x_argument_holding_only_a_secret_is_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    err = _cli_error(capsys, "-X", f"{SECRET}=")
    assert SECRET not in err and "-X" in err and "not shown" in err
    err = _cli_error(capsys, "-X", "linger.mss=5")
    assert "linger.mss" in err


def test_a_secret_value_given_to_a_wrong_name_is_not_echoed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "client.properties"
    props.write_text(f"sasl.pasword={SECRET}\n", encoding="utf-8")
    err = _cli_error(capsys, "--command-config", str(props))
    assert SECRET not in err and "sasl.pasword" in err


# -- the OIDC client secret ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sasl.oauthbearer.client.secret",
                                  "sasl.oauthbearer.client.credentials.client.secret"])
def test_the_oidc_client_secret_is_hidden(name: str) -> None:
    settings = dict(BASE, **{"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "my-client",
                             name: SECRET,
                             "sasl.oauthbearer.token.endpoint.url": "https://127.0.0.1:1/token"})
    if "credentials" in name:
        del settings["sasl.oauthbearer.method"]
        settings["sasl.oauthbearer.client.credentials.client.id"] = settings.pop("sasl.oauthbearer.client.id")
        settings["sasl.login.callback.handler.class"] = \
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    cfg = ProducerConfig(settings)
    assert SECRET not in _printed(cfg)
    assert isinstance(cfg.as_dict()["sasl.oauthbearer.client.credentials.client.secret"], Password)


def test_the_oidc_client_secret_in_jaas_is_hidden() -> None:
    cfg = ProducerConfig(BASE, **{
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.oauthbearer.token.endpoint.url": "https://127.0.0.1:1/token",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                            f'clientId="my-client" clientSecret="{SECRET}" scope="kafka";'})
    assert SECRET not in _printed(cfg)


# -- sasl.jaas.config options (issue 28 item 10): delegation tokens, options no login module reads ------------

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
TOKEN_ID, TOKEN_HMAC = "E6bOaH3lRj2wPXI5RcB1oA", "hmac-" + SECRET


def _scram_config(options: str, mechanism: str = "SCRAM-SHA-512") -> ProducerConfig:
    return ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
                           "sasl.mechanism": mechanism, "sasl.jaas.config": f"{SCRAM} required {options};"})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_tokenauth_sends_the_scram_extension_of_delegation_tokens(mechanism: str) -> None:
    from kproducer.protocol.sasl import ScramServer
    from kproducer.security import channel_security

    cfg = _scram_config(f'username="{TOKEN_ID}" password="{TOKEN_HMAC}" tokenauth="true"', mechanism)
    assert cfg.sasl_login is not None and "delegation token" in repr(cfg.sasl_login)
    factory = channel_security(cfg).sasl_client_factory
    assert factory is not None
    client = factory("127.0.0.1")
    first = client.initial_response()
    assert first.startswith(f"n,,n={TOKEN_ID},r=".encode()) and first.endswith(b",tokenauth=true")
    # the whole exchange against a SCRAM server that knows the token's HMAC as the password
    server = ScramServer({TOKEN_ID: TOKEN_HMAC},
                         hash_name={"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism])
    challenge = server.evaluate_response(first)
    final = client.evaluate_challenge(challenge)
    assert final is not None
    assert client.evaluate_challenge(server.evaluate_response(final)) is None
    assert client.complete and server.complete and server.extensions == {"tokenauth": "true"}
    assert TOKEN_HMAC not in repr(cfg) + repr(cfg.sasl_login) + repr(client)


def test_tokenauth_false_sends_no_extension() -> None:
    from kproducer.security import channel_security

    factory = channel_security(_scram_config('username="u" password="p" tokenauth="FALSE"')).sasl_client_factory
    assert factory is not None and b"tokenauth" not in factory("h").initial_response()


@pytest.mark.parametrize("jaas, mechanism, message", [
    (f'{SCRAM} required username="u" password="{SECRET}" tokenauth="yes";', "SCRAM-SHA-256", "must be"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p" '
     'tokenauth="true";', "PLAIN", "needs ScramLoginModule"),
    # near misses of an option the module reads: Java would ignore them and authenticate otherwise than meant
    (f'{SCRAM} required username="u" password="{SECRET}" tokenAuth="true";', "SCRAM-SHA-256", "'tokenauth'"),
    (f'{SCRAM} required usename="u" password="{SECRET}";', "SCRAM-SHA-256", "'username'"),
    ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientID="app" '
     f'clientSecret="{SECRET}";', "OAUTHBEARER", "'clientId'"),
    ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="app" '
     f'clientSecret="{SECRET}" ssl.truststore.locaton="/x";', "OAUTHBEARER", "not a TLS setting"),
])
def test_bad_jaas_options_are_config_errors_naming_the_option(jaas: str, mechanism: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": mechanism, "sasl.jaas.config": jaas,
                        "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token"}
                       if mechanism == "OAUTHBEARER" else
                       {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": mechanism, "sasl.jaas.config": jaas})
    assert message in str(info.value)
    assert SECRET not in str(info.value)


def test_other_unknown_jaas_options_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    cfg = _scram_config(f'username="u" password="{SECRET}" debug="{SECRET}x" serviceName="kafka"')
    assert cfg.sasl_login is not None and cfg.sasl_login.username == "u"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("debug" in m and "ignores" in m for m in warned)
    assert any("serviceName" in m for m in warned)
    assert SECRET not in caplog.text


def test_unsecured_token_options_kproducer_does_not_make_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "OAUTHBEARER",
                    "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                        'unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",a,b";'})
    assert any("unsecuredLoginListClaim_scope" in r.getMessage() and "not supported" in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
