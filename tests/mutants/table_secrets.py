"""The hand mutants for what crosses the laptop's boundaries: the upload's scan (secret values, a folder
judged by its own path, the upload's gaps), the rehearsal shell, a secret in an error or a debug traceback.

Same format as table.py (the lead merges MUTANTS_SECRETS into its run): each one exact replacement that
breaks one safety check, and the tests that must fail on it.
"""

from __future__ import annotations

from mutant import Mutant

SCAN = "client/onpod/secretscan.py"
UPLOAD = "client/onpod/upload.py"
SETTINGS = "core/settings.py"
SETTING_VALUES = "core/settingvalues.py"
SETTINGS_LOAD = "core/settingsload.py"
CLI = "client/cli.py"
REHEARSE = "testkit/rehearse.py"
VALUES = "tests/secrets/test_upload_values.py"
DEBUG = "tests/secrets/test_debug_output.py"
SHELL = "tests/secrets/test_rehearsal_shell.py"


def values(name: str) -> str:
    return f"{VALUES}::{name}"


def debug(name: str) -> str:
    return f"{DEBUG}::{name}"


def shell(name: str) -> str:
    return f"{SHELL}::{name}"


MUTANTS_SECRETS: tuple[Mutant, ...] = (
    # -- the upload (secret values, the folder judged by its own path) ---------------------------------------------
    Mutant(
        "scan-first-kb-only",
        "upload: only a file's first KB is scanned (a key after it goes to a stranger's machine)",
        SCAN,
        "    while done < size and (chunk := os.read(fd, min(READ_BYTES, size - done))):",
        "    while done < min(size, 1024) and (chunk := os.read(fd, min(1024, size - done))):",
        (values("test_a_key_anywhere_in_a_file_is_found"),),
    ),
    Mutant(
        "scan-top-level-folders-only",
        "upload: a credential folder below the top level (deploy/.kube/config) is sent",
        SCAN,
        "    for i, part in enumerate(parts[:-1]):",
        "    for i, part in enumerate(parts[:1]):",
        (values("test_a_credential_folder_below_the_top_level_is_refused"),),
    ),
    Mutant(
        "scan-aws-folder-forgotten",
        "upload: .aws/ is not a credential folder (SSO cached tokens under .aws/sso/cache are sent)",
        SCAN,
        '    ".aws": "a folder of AWS credentials",',
        '    ".aws-cli": "a folder of AWS credentials",',
        (values("test_aws_sso_cached_tokens_are_refused_by_path_and_by_content"),),
    ),
    Mutant(
        "scan-sso-token-content",
        "upload: an AWS SSO token copied under another name is not known by its content",
        SCAN,
        "        lambda m: _EXPIRES_AT.search(m.string) is not None,",
        "        lambda m: False,",
        (values("test_aws_sso_cached_tokens_are_refused_by_path_and_by_content"),),
    ),
    Mutant(
        "scan-jks-magic",
        "upload: a Java key store under another name (model.bin) is sent",
        SCAN,
        '    b"\\xfe\\xed\\xfe\\xed": "a Java key store (JKS, by its bytes)",',
        '    b"\\xfe\\xed\\xfe\\xee": "a Java key store (JKS, by its bytes)",',
        (values("test_a_java_key_store_under_another_name_is_known_by_its_bytes"),),
    ),
    Mutant(
        "scan-known-values-ignored",
        "upload: the secret values gpuc holds are not searched (a bare Vast key, the admin token go)",
        SCAN,
        "        name = known_in(window, known) if known else None",
        "        name = None",
        (
            values("test_a_file_holding_a_value_gpuc_holds_is_refused_naming_the_setting_never_the_value"),
            values("test_the_issue_s_three_files_are_refused"),
        ),
    ),
    Mutant(
        "scan-let-through-unsearched",
        "upload: a file let through with `!name` in .gpucignore carries the user's key",
        SCAN,
        "    found = (check_file(folder, rel, known, shapes=rel not in let_through) for rel in sorted(files))",
        "    found = (check_file(folder, rel, known) for rel in sorted(files) if rel not in let_through)",
        (values("test_a_file_let_through_by_name_still_never_carries_a_known_value"),),
    ),
    Mutant(
        "notify-url-tokens-unknown",
        "upload: the token inside a notification URL is not a known secret (a bot token in a script goes)",
        SETTINGS,
        "            for piece in url_secrets(value):",
        "            for piece in url_secrets(value)[:0]:",
        (values("test_a_file_holding_a_value_gpuc_holds_is_refused_naming_the_setting_never_the_value"),),
    ),
    Mutant(
        "cp-root-unjudged",
        "cp/up: the folder sent is not judged by its own path (`gpuc cp ~/.kube POD:` sends its config)",
        UPLOAD,
        "    where = secretscan.root_reason(folder)",
        "    where = None",
        (
            values("test_up_from_inside_a_credential_folder_is_refused"),
            values("test_cp_refuses_credential_folders_by_their_own_name_and_known_values"),
        ),
    ),
    # -- a secret in what gpuc prints ---------------------------------------------------------------
    Mutant(
        "header-unsafe-accepted",
        "a key with a trailing newline is accepted: `gpuc ls` crashes and the debug traceback quotes it",
        SETTING_VALUES,
        "    if value.isascii() and value.isprintable():",
        "    if True:",
        (
            debug("test_a_value_no_header_can_carry_is_refused_when_read"),
            debug("test_ls_with_a_crlf_key_says_which_and_how_never_the_key"),
        ),
    ),
    Mutant(
        "debug-traceback-raw",
        "GPUC_DEBUG=1 prints Python's own traceback: every secret in a message shows",
        CLI,
        'code = report_debug(exc) if os.environ.get("GPUC_DEBUG") else report_error(exc)',
        'code = report_error(exc) if not os.environ.get("GPUC_DEBUG") else sys.exit(traceback.print_exc() or 70)',
        (debug("test_a_forced_traceback_prints_no_secret"),),
    ),
    Mutant(
        "error-masks-environment-only",
        "an error masks only *_KEY/_TOKEN/_SECRET variables: a value from .env or config.json shows",
        CLI,
        "    secrets = known_secrets()",
        '    secrets = [v for k, v in os.environ.items() if k.endswith(("_KEY", "_TOKEN", "_SECRET")) and v]',
        (debug("test_a_forced_traceback_prints_no_secret"),),
    ),
    # -- a rehearsal reaches nothing real ---------------------------------------------------------
    Mutant(
        "rehearsal-endpoints-unchecked",
        "rehearsal: a real provider URL, watchdog or bucket re-exported in the shell is used",
        SETTINGS,
        "            _check_rehearsal(self)",
        "            pass",
        (
            shell("test_every_endpoint_setting_is_judged_in_a_rehearsal"),
            shell("test_a_real_endpoint_exported_again_is_refused_naming_it"),
        ),
    ),
    Mutant(
        "rehearsal-prefix-loop-off",
        "rehearsal: a gpuc setting not in the explicit list (added tomorrow) keeps the user's value",
        REHEARSE,
        "        '  unset \"$__gpuc_name\"',",
        "        '  :',",
        (shell("test_after_the_dot_line_no_value_of_the_users_shell_that_gpuc_reads_is_left"),),
    ),
    Mutant(
        "rehearsal-other-provider-real",
        "rehearsal: the provider it does not emulate keeps its real URL",
        REHEARSE,
        "            env[env_name(name)] = NOWHERE",
        "            pass",
        (shell("test_ls_in_the_rehearsal_reaches_only_loopback"),),
    ),
    Mutant(
        "rehearsal-cloud-keys-kept",
        "rehearsal: AWS keys re-exported in the shell are not refused (boto3 would use them)",
        SETTINGS_LOAD,
        '        problem = check_rehearsal_environ(merged, Path(merged["GPUC_REHEARSAL"]))',
        "        problem = None",
        (shell("test_real_cloud_credentials_exported_again_are_refused"),),
    ),
)
