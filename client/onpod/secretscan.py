"""Credentials in the project `up` is about to upload, found by name and by content.

A pod on Vast is someone else's machine: a key that lands there is a key handed over. A fixed list of
names missed most of what a real folder holds (`.envrc`, `.pgpass`, a key called `deploy_key`, a
service-account JSON...), so each file that would be uploaded is checked twice:

- by its path: credential folders (`.ssh/`, `.aws/`, `.config/gh/`, ...), well-known credential files
  (`.netrc`, `.pgpass`, `.npmrc`, `kaggle.json`, `credentials`, shell histories, ...), key and key-store
  suffixes (`*.key`, `*.p12`, `*.pem` unless it holds certificates only, ...);
- by its whole content, read in chunks (a key after the first KB is a key; memory stays one chunk): the
  secret VALUES gpuc itself holds (provider keys, admin token, webhook secrets, the tokens inside the
  notification URLs, S3 and git secrets), named by their setting, never shown; private-key
  blocks (PEM, OpenSSH, PGP, PuTTY), token shapes (AWS key ids with a secret beside them, `hf_`, GitHub,
  Slack, OpenAI-style `sk-`, RunPod `rpa_`, Telegram bot tokens), a Google service-account key or user
  login (`authorized_user` with its refresh token), an AWS SSO cached token, an AWS secret key assignment;
  a binary file (a NUL in its first 8 KB) by its magic bytes (PKCS#12, Java key stores) and the known
  values only. The whole of every file is affordable: `up` refuses a project over GPUC_UPLOAD_MAX_MB
  before this scan runs.

A hand-written set, not detect-secrets: see the README's Dependencies. Token shapes need a random-looking
tail of a token's length, so a README that says "sk-" in prose, `hf_hub_download` or a git hash passes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

READ_BYTES = 1 << 20  # one chunk: memory stays this size whatever the file's
SNIFF_BYTES = 8192  # a NUL in here: binary, checked by magic bytes (and the known values) only
# Each chunk is searched with the end of the one before it: a key or a token cut by a chunk's end is whole
# in the next window. Longer than a token, a PEM header with its first base64 line, an AWS id and secret.
OVERLAP = 4096

CREDENTIAL_DIRS = {
    ".ssh": "a folder of ssh keys",
    ".aws": "a folder of AWS credentials",
    ".gnupg": "a folder of GnuPG keys",
    ".kube": "a folder of Kubernetes credentials",
    ".docker": "a folder of Docker registry logins",
    ".azure": "a folder of Azure credentials",
    "gcloud": "a folder of Google Cloud credentials",
    ".password-store": "a password store",
}
_HISTORY = "a shell history (every command typed, tokens included)"
CREDENTIAL_NAMES = {
    ".netrc": "login passwords (netrc)",
    "_netrc": "login passwords (netrc)",
    ".git-credentials": "git credentials",
    ".pgpass": "PostgreSQL passwords",
    ".npmrc": "npm settings, where registry tokens are kept",
    ".pypirc": "PyPI upload credentials",
    ".envrc": "a direnv file (it exports secrets into the shell)",
    ".secrets": "a secrets file",
    "kaggle.json": "a Kaggle API key",
    "credentials": "a credentials file",
    "credentials.json": "a credentials file",
    "secrets.toml": "a secrets file",
    "secrets.yaml": "a secrets file",
    "secrets.yml": "a secrets file",
    "secrets.json": "a secrets file",
    "id_rsa": "an ssh private key (by its name)",
    "id_dsa": "an ssh private key (by its name)",
    "id_ecdsa": "an ssh private key (by its name)",
    "id_ed25519": "an ssh private key (by its name)",
    "id_ecdsa_sk": "an ssh private key (by its name)",
    "id_ed25519_sk": "an ssh private key (by its name)",
    **dict.fromkeys(
        (
            ".bash_history",
            ".zsh_history",
            ".sh_history",
            ".history",
            ".python_history",
            ".psql_history",
            ".mysql_history",
            ".sqlite_history",
            ".node_repl_history",
            ".lesshst",
            "fish_history",
        ),
        _HISTORY,
    ),
}
CREDENTIAL_SUFFIXES = {
    ".key": "a private key file (by its name)",
    ".p12": "a PKCS#12 key store (by its name)",
    ".pfx": "a PKCS#12 key store (by its name)",
    ".jks": "a Java key store (by its name)",
    ".keystore": "a Java key store (by its name)",
    ".tfvars": "Terraform variables, where secrets are usually kept",
    ".env": "an env file: secrets reach the pod only through GPUC_POD_SECRETS",
}
_SUFFIXES = (".tfvars.json", *CREDENTIAL_SUFFIXES)
_PEM = "a PEM file holding more than certificates"
# Folder pairs (parent, child) that hold a login: the GitHub CLI's token, a Hugging Face token file.
# (Leading dots dropped: `.huggingface/token` and `huggingface/token` both.)
CREDENTIAL_PAIRS = {("config", "gh"): "the GitHub CLI's login", ("huggingface", "token"): "a Hugging Face token file"}


_DOTENV = re.compile(r"^\.env(\..+)?$")
_DOTENV_EXAMPLES = (".example", ".sample", ".template", ".dist")


def dotenv_file(name: str) -> bool:
    """`.env`, `.env.local`, `.env.production`...: dotenv's own names (gpuc reads `.env` itself). Examples
    (`.env.example`, `.env.sample`...) hold no values and are not."""
    return bool(_DOTENV.match(name)) and not name.endswith(_DOTENV_EXAMPLES)


def path_reason(rel: str) -> str | None:
    """Why this path (posix, relative to the project) looks like a credential by its name alone, or None."""
    parts = rel.split("/")
    name = parts[-1]
    if dotenv_file(name):
        return CREDENTIAL_SUFFIXES[".env"]
    for i, part in enumerate(parts[:-1]):
        if part in CREDENTIAL_DIRS:
            return f"inside {'/'.join(parts[: i + 1])}/, {CREDENTIAL_DIRS[part]}"
        pair = CREDENTIAL_PAIRS.get((part.lstrip("."), parts[i + 1]))
        if pair is not None:
            return pair
    if name in CREDENTIAL_NAMES:
        return CREDENTIAL_NAMES[name]
    lower = name.lower()
    if lower.endswith(_SUFFIXES):
        suffix = next(x for x in _SUFFIXES if lower.endswith(x))
        if lower != suffix:
            return CREDENTIAL_SUFFIXES[".tfvars" if suffix == ".tfvars.json" else suffix]
    return None


def root_reason(root: Path) -> str | None:
    """Why the folder being sent is itself inside a credential folder, or None: `gpuc cp ~/.kube POD:` sends
    `config`, a name that says nothing, from a folder whose own name says everything. Judged by
    the path as given and as resolved (a folder reached through a link to ~/.docker is ~/.docker)."""
    for path in dict.fromkeys((root.absolute(), root.resolve())):
        why = path_reason(f"{path.as_posix().lstrip('/')}/-")  # a child: the folder's parts are judged
        if why is not None:
            return why.replace("inside ", f"{path} is inside /", 1) if why.startswith("inside ") else why
    return None


# -- content --------------------------------------------------------------------------------------
def _mixed(token: bytes) -> bool:
    """A token's random tail has both cases; prose, identifiers and hex digests do not."""
    return any(65 <= c <= 90 for c in token) and any(97 <= c <= 122 for c in token)


def _tail_mixed(match: re.Match[bytes]) -> bool:
    return _mixed(match.group("tail"))


# A key block is a header followed by base64 (PEM may put `Proc-Type:`-style lines first): the header alone,
# as a parser or a doc quotes it, is not a key.
_BLOCK = rb"-----BEGIN %s-----[ \t]*\r?\n(?:[A-Za-z-]+:[^\n]*\n|[ \t]*\r?\n)*[A-Za-z0-9+/=]{40,}"
# The literal first, the lookbehind after it: see _token.
_AWS_ID = re.compile(rb"A[KS]IA(?<![A-Z0-9]A[KS]IA)[A-Z0-9]{16}(?![A-Z0-9])")
_AWS_SECRET = re.compile(rb"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_NEAR = 1024  # bytes either side of a key id in which its secret is looked for


# Gates: one cheap search each over the prefix (a literal, which re finds as fast as `in`); a rule's own
# pattern runs only where its gate was found. Shared gates are searched once per file.
_KEY_BLOCK = re.compile(rb"PRIVATE KEY")
_SECRET_KEY = re.compile(rb"ccess_key")  # two literal gates: an alternation of them is 10x slower to search
_SECRET_KEY_UPPER = re.compile(rb"CCESS_KEY")
_AWS_GATE = re.compile(rb"A[KS]IA")
_SERVICE_ACCOUNT = re.compile(rb'"type"\s*:\s*"service_account"')
_EXPIRES_AT = re.compile(rb'"expiresAt"\s*:')


@dataclass(frozen=True)
class Rule:
    why: str
    gate: re.Pattern[bytes]
    pattern: re.Pattern[bytes]
    accept: Callable[[re.Match[bytes]], bool] | None = None

    def found(self, data: bytes) -> bool:
        return any(self.accept is None or self.accept(m) for m in self.pattern.finditer(data))


def _token(
    why: str,
    prefix: bytes,
    rest: bytes,
    *,
    not_after: bytes = rb"[A-Za-z0-9_]",
    accept: Callable[[re.Match[bytes]], bool] | None = _tail_mixed,
) -> Rule:
    """A token shape: its literal prefix (the gate), not glued to a word before it, then `rest`. The
    pattern starts with the literal and checks what precedes it afterwards: re then skips to the literal
    instead of trying every position (50x faster on a 64 KB prefix)."""
    literal = re.escape(prefix)
    return Rule(why, re.compile(literal), re.compile(literal + rb"(?<!" + not_after + literal + rb")" + rest), accept)


RULES = (
    Rule("an OpenSSH private key", _KEY_BLOCK, re.compile(_BLOCK % rb"OPENSSH PRIVATE KEY")),
    Rule("a PGP private key", _KEY_BLOCK, re.compile(_BLOCK % rb"PGP PRIVATE KEY BLOCK")),
    Rule("a private key (PEM)", _KEY_BLOCK, re.compile(_BLOCK % rb"(?:(?:RSA|DSA|EC|ENCRYPTED) )?PRIVATE KEY")),
    Rule(
        "a Google Cloud service-account key",
        _KEY_BLOCK,  # its "private_key" holds a PEM block: one gate less to search
        re.compile(rb'"private_key"\s*:\s*"-----BEGIN [A-Z ]*PRIVATE KEY-----'),
        lambda m: _SERVICE_ACCOUNT.search(m.string) is not None,
    ),
    *(
        Rule(
            "an AWS secret access key",
            gate,
            re.compile(
                rb"(?i:aws_secret_access_key)[\"']?\s*[=:]\s*[\"']?(?P<tail>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
            ),
            _tail_mixed,
        )
        for gate in (_SECRET_KEY, _SECRET_KEY_UPPER)
    ),
    Rule(
        "an AWS credentials file",
        _SECRET_KEY,
        re.compile(
            rb"(?m)^\[[A-Za-z0-9 _.-]+\][ \t]*\r?$(?=[\s\S]*^[ \t]*aws_secret_access_key[ \t]*=[ \t]*[^\s(\[{]+)"
        ),
    ),
    _token("a Hugging Face token (hf_...)", b"hf_", rb"(?P<tail>[A-Za-z0-9]{30,})(?![A-Za-z0-9_])"),
    Rule(
        "a GitHub token",
        re.compile(rb"gh[pousr]_|github_pat_"),
        re.compile(rb"g(?<![A-Za-z0-9_]g)(?:h[pousr]_(?P<tail>[A-Za-z0-9]{36,})|ithub_pat_(?P<pat>[A-Za-z0-9_]{50,}))"),
        lambda m: _mixed(m.group("tail") or m.group("pat")),
    ),
    _token("a Slack token", b"xox", rb"[baprs]-[0-9]{6,}-(?P<tail>[A-Za-z0-9-]{10,})", accept=None),
    _token(
        "an OpenAI-style API key (sk-...)",
        b"sk-",
        rb"(?:proj-|svcacct-|admin-|ant-[a-z]+\d*-)?(?P<tail>[A-Za-z0-9_-]{32,})",
        not_after=rb"[A-Za-z0-9_-]",
    ),
    _token(
        "a RunPod API key (rpa_...)",
        b"rpa_",
        rb"(?P<tail>[A-Za-z0-9]{30,})",
        accept=lambda m: any(48 <= c <= 57 for c in m.group("tail")) and not m.group("tail").isdigit(),
    ),
    Rule(
        "a Google Cloud user login (authorized_user, with its refresh token)",
        re.compile(rb"authorized_user"),
        re.compile(rb'"type"\s*:\s*"authorized_user"'),
        lambda m: b'"refresh_token"' in m.string,
    ),
    Rule(
        "an AWS SSO cached token (~/.aws/sso/cache)",
        re.compile(rb"accessToken"),
        re.compile(rb'"accessToken"\s*:\s*"[^"]{20,}"'),
        lambda m: _EXPIRES_AT.search(m.string) is not None,
    ),
    Rule(
        "a Telegram bot token",
        re.compile(rb":A"),
        re.compile(rb"(?<![0-9])[0-9]{5,16}:(?P<tail>A[A-Za-z0-9_-]{34})(?![A-Za-z0-9_-])"),
        _tail_mixed,
    ),
)
GATES = tuple(dict.fromkeys([*(rule.gate for rule in RULES), _AWS_GATE]))


def _aws_key_pair(data: bytes) -> bool:
    """An AWS access key id with a 40-character secret near it (the id alone identifies, it does not sign)."""
    for match in _AWS_ID.finditer(data):
        if match.group().endswith(b"EXAMPLE"):  # AWS's documentation key
            continue
        near = data[max(0, match.start() - _NEAR) : match.end() + _NEAR]
        if any(_mixed(s.group()) for s in _AWS_SECRET.finditer(near)):
            return True
    return False


def _pkcs12(data: bytes) -> bool:
    """DER: SEQUENCE { INTEGER 3 (the PFX version), ContentInfo { OID 1.2.840.113549.1.7.x ... } }."""
    if len(data) < 32 or data[0] != 0x30:
        return False
    start = 2
    if data[1] & 0x80:
        size = data[1] & 0x7F
        if size > 4:
            return False
        start += size
    return (
        data[start : start + 3] == b"\x02\x01\x03"
        and b"\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x07" in data[start + 3 : start + 24]
    )


# A key store's first bytes, whatever the file is called (a `model.bin` that is a JKS is a JKS).
MAGIC = {
    b"\xfe\xed\xfe\xed": "a Java key store (JKS, by its bytes)",
    b"\xce\xce\xce\xce": "a Java key store (JCEKS, by its bytes)",
    b"PuTTY-User-Key-File-": "a PuTTY private key",
}


def magic_reason(head: bytes) -> str | None:
    """Why a file's first bytes say it is a key store, or None."""
    for magic, why in MAGIC.items():
        if head.startswith(magic):
            return why
    return "a PKCS#12 key store (by its bytes)" if _pkcs12(head) else None


def text_reason(data: bytes) -> str | None:
    """Why this window of a text file holds a credential's shape, or None."""
    opened = {gate for gate in GATES if gate.search(data)}
    if not opened:
        return None  # most files: one search per gate, and done
    for rule in RULES:
        if rule.gate in opened and rule.found(data):
            return rule.why
    if _AWS_GATE in opened and _aws_key_pair(data):
        return "an AWS access key with its secret"
    return None


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the project, posix
    why: str

    def line(self) -> str:
        return f"{self.path}: {self.why}"


Known = Mapping[bytes, str]  # a secret value gpuc holds -> the setting that holds it (never shown)


def known_in(window: bytes, known: Known) -> str | None:
    """The setting whose value this window holds, or None. One `in` per value: bytes search skips ahead
    by the value's length, several GB/s, faster than one regex over the alternatives."""
    for value, name in known.items():
        if value in window:
            return name
    return None


def check_file(root: str, rel: str, known: Known | None = None, *, shapes: bool = True) -> Finding | None:
    """`root` a folder path as text, `rel` a posix path in it (os-level I/O: pathlib's own cost was a third
    of the scan on a project of small files). The whole file, one chunk at a time. `shapes` False: only the
    known values (a file the user let through with `!name` in .gpucignore still never carries their key)."""
    by_name = path_reason(rel) if shapes else None
    if by_name is not None:
        return Finding(rel, by_name)
    if not shapes and not known:
        return None
    try:
        fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_NONBLOCK)  # a fifo swapped in never blocks
    except OSError:
        return None  # unreadable here is unreadable for the archive too: that step says so
    try:
        why = _read_through(fd, rel.lower().endswith(".pem") and shapes, known or {}, shapes)
    except OSError:
        return None
    finally:
        os.close(fd)
    return Finding(rel, why) if why is not None else None


def _read_through(fd: int, pem: bool, known: Known, shapes: bool) -> str | None:
    overlap = max([OVERLAP, *(len(v) for v in known)])
    tail = b""
    binary = private = begin = False
    first = True
    # Reads sized to the file (a 1 MiB buffer for a 2 KB script costs more than its scan) and no read for
    # the end: what the file held when opened is scanned; a file still being written is not a project's.
    size = os.fstat(fd).st_size
    done = 0
    while done < size and (chunk := os.read(fd, min(READ_BYTES, size - done))):
        done += len(chunk)
        window = tail + chunk if tail else chunk
        if first:
            binary = b"\0" in chunk[:SNIFF_BYTES] or not shapes
            why = magic_reason(chunk) if shapes else None
            if why is not None:
                return why
            first = False
        name = known_in(window, known) if known else None
        if name is not None:
            return f"holds the value of {name}, a secret gpuc holds (never shown)"
        if not binary:
            why = text_reason(window)
            if why is not None:
                return why
        if pem:
            begin = begin or b"-----BEGIN " in window
            private = private or b"PRIVATE KEY" in window
        tail = window[-overlap:]
    # A .pem of certificates or public keys only (a CA bundle) holds nothing secret; any other is a key.
    return _PEM if pem and (private or not begin) else None


def scan(root: Path, files: Iterable[str], known: Known | None = None, allowed: Iterable[str] = ()) -> list[Finding]:
    """Every file of `files` (relative to root) that looks like a credential, in order. `known`: the
    secret values gpuc holds (core.settings.Settings.named_secrets), each refused wherever it is, in the
    `allowed` files too (let through by name and shape only)."""
    folder = str(root)
    let_through = set(allowed)
    found = (check_file(folder, rel, known, shapes=rel not in let_through) for rel in sorted(files))
    return [f for f in found if f is not None]
