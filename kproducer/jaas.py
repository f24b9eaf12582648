"""``sasl.jaas.config``: Java's JAAS login module line, parsed without ever showing a value.

:func:`parse_jaas_config` reads ``<LoginModule class> <flag> [name=value ...];`` (values plain words or quoted,
with Java's escapes, ``//`` and ``/* */`` comments) into a :class:`JaasLoginModule`; :func:`check_jaas_options`
refuses near misses of the option names each login module reads. kproducer.security turns the module and its
options into the SASL login (:class:`~kproducer.security.SaslLogin`). Errors and log lines name positions and
options, never values: a JAAS line holds passwords.
"""
from __future__ import annotations

import difflib
import logging
import re
from typing import Callable, Dict, List, Tuple

from .errors import ConfigError
from .protocol.sasl import SUPPORTED_MECHANISMS

log = logging.getLogger(__name__)

_JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAAS_WORD = re.compile(r"[A-Za-z0-9_.$\-]+")
_JAAS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}
#: login module (simple class name) -> the mechanism family it supplies credentials for
_LOGIN_MODULES = {"PlainLoginModule": "PLAIN", "ScramLoginModule": "SCRAM", "OAuthBearerLoginModule": "OAUTHBEARER"}
_JAAS_EXAMPLE = ('e.g. org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                 'password="...";')


class JaasLoginModule:
    """One login module of a ``sasl.jaas.config`` value. ``repr()`` shows the option names, never values."""

    __slots__ = ("module", "flag", "options")

    def __init__(self, module: str, flag: str, options: Dict[str, str]) -> None:
        self.module = module
        self.flag = flag
        self.options = options

    @property
    def simple_name(self) -> str:
        return self.module.rsplit(".", 1)[-1]

    @property
    def mechanism_family(self) -> str:
        """PLAIN, SCRAM or OAUTHBEARER; ConfigError for login modules kproducer cannot use."""
        family = _LOGIN_MODULES.get(self.simple_name)
        if family is not None:
            return family
        if self.simple_name == "Krb5LoginModule":
            raise ConfigError("sasl.jaas.config uses Krb5LoginModule: Kerberos (GSSAPI) is not supported by "
                              f"kproducer; supported mechanisms: {', '.join(SUPPORTED_MECHANISMS)}")
        if self.simple_name == "IAMLoginModule":
            raise ConfigError("sasl.jaas.config uses Amazon MSK's IAMLoginModule, a Java class: with kproducer use "
                              "sasl.mechanism=OAUTHBEARER and a sasl_oauth_token_provider (e.g. from "
                              "aws-msk-iam-sasl-signer-python); see docs/security.md")
        raise ConfigError(f"sasl.jaas.config uses login module {self.module}, which kproducer does not know; "
                          "it knows PlainLoginModule, ScramLoginModule and OAuthBearerLoginModule")

    def __repr__(self) -> str:
        return f"JaasLoginModule({self.module} {self.flag} options={sorted(self.options)})"


def _jaas_error(what: str) -> ConfigError:
    return ConfigError(f"sasl.jaas.config is malformed: {what} ({_JAAS_EXAMPLE})")


def _jaas_tokens(text: str) -> List[Tuple[str, str, int]]:
    """(kind, text, position) with kind word, string, '=' or ';'. Errors name positions, never the text."""
    out: List[Tuple[str, str, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise _jaas_error(f"a /* comment at position {i} is not closed")
            i = j + 2
        elif c in "=;":
            out.append((c, c, i))
            i += 1
        elif c in "\"'":
            start = i
            i += 1
            chars: List[str] = []
            while True:
                if i >= n:
                    raise _jaas_error(f"the quoted value at position {start} is not closed")
                ch = text[i]
                if ch == c:
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":
                        j = i + 1
                        while j < n and j < i + 4 and text[j] in "01234567":
                            j += 1
                        chars.append(chr(int(text[i + 1:j], 8)))
                        i = j
                        continue
                    chars.append(_JAAS_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                chars.append(ch)
                i += 1
            out.append(("string", "".join(chars), start))
        else:
            m = _JAAS_WORD.match(text, i)
            if m is None:
                raise _jaas_error(f"unexpected character at position {i} (quote values that are not plain words)")
            out.append(("word", m.group(), i))
            i = m.end()
    return out


def parse_jaas_config(text: str) -> JaasLoginModule:
    """Parse a ``sasl.jaas.config`` value: exactly one ``<LoginModule class> <flag> [name=value ...];``
    with values plain words or quoted (``\"`` and ``\\`` escapes). ConfigError that never shows a value."""
    tokens = _jaas_tokens(text)
    modules: List[JaasLoginModule] = []
    i = 0
    while i < len(tokens):
        kind, module, pos = tokens[i]
        if kind != "word":
            raise _jaas_error(f"expected a login module class name at position {pos}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in _JAAS_FLAGS:
            raise _jaas_error(f"the login module {module} must be followed by a control flag "
                              f"({', '.join(_JAAS_FLAGS)})")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: Dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise _jaas_error("the login module's options must end with ';'")
            kind, key, pos = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise _jaas_error(f"expected an option name at position {pos}")
            if i + 1 >= len(tokens) or tokens[i + 1][0] != "=":
                raise _jaas_error(f"option {key} must be followed by '=' and a value")
            if i + 2 >= len(tokens) or tokens[i + 2][0] not in ("word", "string"):
                raise _jaas_error(f"option {key} has no value")
            options[key] = tokens[i + 2][1]
            i += 3
        modules.append(JaasLoginModule(module, flag, options))
    if not modules:
        raise _jaas_error("no login module")
    if len(modules) > 1:
        raise ConfigError(f"sasl.jaas.config has {len(modules)} login modules; a client takes exactly one")
    return modules[0]


#: the options each login module reads, as Java's (Java ignores any other option without a word)
_JAAS_OPTIONS: Dict[str, Tuple[str, ...]] = {
    "PlainLoginModule": ("username", "password"),
    "ScramLoginModule": ("username", "password", "tokenauth"),
    "OAuthBearerLoginModule": ("clientId", "clientSecret", "scope", "unsecuredLoginStringClaim_sub",
                               "unsecuredLoginLifetimeSeconds"),
}
#: OAuthBearerLoginModule's option families: SASL extensions (OAuth, unsecured) and the token endpoint's TLS
_JAAS_OPTION_PREFIXES = ("extension_", "unsecuredLoginExtension_", "ssl.")
#: options Java's unsecured login handler knows that kproducer's unsecured test tokens do not make
_JAAS_UNSUPPORTED = ("unsecuredLoginStringClaim_", "unsecuredLoginNumberClaim_", "unsecuredLoginListClaim_",
                     "unsecuredLoginPrincipalClaimName", "unsecuredLoginScopeClaimName")


def check_jaas_options(jaas: JaasLoginModule, is_tls_setting: Callable[[str], bool]) -> None:
    """Options the login module does not read: a ConfigError for a near miss of one it reads (``tokenAuth``,
    ``usename``, ``clientID``: Java would ignore it, and authenticate otherwise than meant), a warning for the
    others (ignored, as Java does). TLS options of the OAuth token endpoint must be TLS settings kproducer knows.
    ``is_tls_setting(name)``: whether a name is a producer TLS setting (in any spelling). Messages name options,
    never their values."""
    module = jaas.simple_name
    known = _JAAS_OPTIONS.get(module, ())
    for option in jaas.options:
        if option in known or (module == "OAuthBearerLoginModule" and option.startswith(_JAAS_OPTION_PREFIXES)
                               and option not in _JAAS_OPTION_PREFIXES):
            if option.startswith("ssl.") and not is_tls_setting(option):
                raise ConfigError(f"sasl.jaas.config: {module} option {option!r} is not a TLS setting kproducer "
                                  "knows (the token endpoint's TLS takes ssl.truststore.*, ssl.keystore.* ...)")
            continue
        if module == "OAuthBearerLoginModule" and option.startswith(_JAAS_UNSUPPORTED):
            log.warning("sasl.jaas.config: OAuthBearerLoginModule option %s is not supported by kproducer (its "
                        "unsecured test tokens carry sub, iat and exp only): ignored", option)
            continue
        close = [k for k in known if k.lower() == option.lower()] or \
            difflib.get_close_matches(option, known, n=1, cutoff=0.75)
        if close:
            raise ConfigError(f"sasl.jaas.config: {module} has no option {option!r}; did you mean {close[0]!r}? "
                              "(option names are case-sensitive; Java would ignore it silently)")
        log.warning("sasl.jaas.config: %s ignores the option %s (as Java does); it reads %s", module, option,
                    ", ".join(known) or "no options")


__all__ = ["JaasLoginModule", "check_jaas_options", "parse_jaas_config"]
