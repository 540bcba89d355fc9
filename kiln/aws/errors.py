"""AWS's refusals in one line each: the error codes kiln tells apart, the words it uses for them, and aws_call.

Credentials have one wording for every command (`no_credentials`): none found, an incomplete set, a profile that is
not there, an expired SSO session, or keys AWS rejects all read the same, with the reason in parentheses.

botocore and the standard library only (and kiln.contracts.errors for the kinds of error): no session is made here.
The reaper's Lambda code keeps its own error_code (it imports nothing of kiln); tests hold the two the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from botocore import exceptions as bx
from botocore.exceptions import BotoCoreError, ClientError

from kiln.contracts.errors import Failure

ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}
THROTTLED = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"}
# Codes with which AWS rejects the credentials themselves (missing, unknown, expired, or a wrong secret).
# Common errors: https://docs.aws.amazon.com/awsconsolehelpdocs/latest/gsg/common-errors.html (ExpiredTokenException,
# UnrecognizedClientException, MissingAuthenticationToken), https://docs.aws.amazon.com/emr/latest/APIReference/
# CommonErrors.html (InvalidClientTokenId); EC2's AuthFailure; S3's ExpiredToken, InvalidAccessKeyId, InvalidToken,
# SignatureDoesNotMatch (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html).
BAD_CREDENTIALS = {
    "AuthFailure",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidAccessKeyId",
    "InvalidClientTokenId",
    "InvalidToken",
    "MissingAuthenticationToken",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
}
# A request signed more than 15 minutes away from AWS's clock (same common-errors page): the clock, not the keys.
CLOCK_SKEW = {"RequestExpired", "RequestTimeTooSkewed"}
# botocore's own ways of finding no credentials: before any request is sent.
SSO_ERRORS = (bx.SSOError, bx.TokenRetrievalError) + ((bx.LoginError,) if hasattr(bx, "LoginError") else ())
CREDENTIAL_ERRORS = (
    bx.NoCredentialsError,
    bx.PartialCredentialsError,
    bx.ProfileNotFound,
    bx.CredentialRetrievalError,
    *SSO_ERRORS,
)
WHERE_CREDENTIALS_COME_FROM = "environment, profile, SSO or instance role"


def error_code(exc: ClientError) -> str:
    """Return the AWS error code of EXC."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def one_line(text: str, limit: int = 300) -> str:
    """Return TEXT on one line, whitespace collapsed, cut to LIMIT characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error_message(error: ClientError) -> str:
    """Return AWS's own message of ERROR on one line."""
    return one_line(str(error.response.get("Error", {}).get("Message", "")))


def is_credentials_error(error: BaseException | None) -> bool:
    """Whether ERROR means kiln has no credentials AWS takes: none, incomplete, unusable, or rejected by AWS."""
    if isinstance(error, (NoCredentials, *CREDENTIAL_ERRORS)):
        return True
    return isinstance(error, ClientError) and error_code(error) in BAD_CREDENTIALS


def _why(error: BaseException | None) -> str:
    """Return what is wrong with the credentials ERROR complains of, or "" when none were found."""
    if isinstance(error, NoCredentials):
        return _why(error.error)
    fields = getattr(error, "kwargs", {})
    if isinstance(error, bx.PartialCredentialsError):
        source = {"env": "the environment"}.get(fields.get("provider", ""), fields.get("provider", "a source"))
        return f"{source} has only some of them: {fields.get('cred_var', 'one')} is missing"
    if isinstance(error, bx.ProfileNotFound):
        return f"profile {fields.get('profile', '')} is not in the AWS config"
    if isinstance(error, SSO_ERRORS):
        return "the SSO session has expired or was never started: run `aws sso login`"
    if isinstance(error, bx.CredentialRetrievalError):
        return f"{fields.get('provider', 'a source')} gave none: {one_line(str(fields.get('error_msg', '')), 120)}"
    if isinstance(error, ClientError) and error_code(error) in BAD_CREDENTIALS:
        return f"AWS rejected those found: {error_code(error)} on {error.operation_name}"
    return ""


def credentials_wording(error: BaseException | None = None, *, otherwise: str = "") -> str:
    """Return the one wording, without a command, for ERROR (see no_credentials)."""
    why = _why(error)
    reason = f" ({why})" if why else ""
    alternative = f", or {otherwise}" if otherwise else ""
    return (
        f"no AWS credentials{reason}: set or refresh them ({WHERE_CREDENTIALS_COME_FROM}) for the account to use"
        f"{alternative}"
    )


def no_credentials(command: str, error: BaseException | None = None, *, otherwise: str = "") -> str:
    """Return the one line every kiln COMMAND prints when it cannot ask AWS for want of credentials AWS takes.

    ERROR (NoCredentials, one of CREDENTIAL_ERRORS, or a ClientError with a BAD_CREDENTIALS code) gives the reason;
    OTHERWISE names what the command can do without AWS, if anything.
    """
    return f"{command}: {credentials_wording(error, otherwise=otherwise)}"


class NoCredentials(Failure):
    """AWS cannot be asked for want of credentials it takes; ERROR is botocore's. A face prints no_credentials()."""

    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__(credentials_wording(error))
        self.error = error


def raise_if_no_credentials(error: BaseException) -> None:
    """Raise NoCredentials when ERROR is a credentials failure, so the command says so in no_credentials's words.

    The places that wrap an AWS error into their own one line call this first: a missing credential is no fault
    of the call that happened to be first.
    """
    if is_credentials_error(error):
        raise (error if isinstance(error, NoCredentials) else NoCredentials(error)) from None


def explain(what: str, error: ClientError) -> str:
    """Return one line for ERROR raised by the AWS call WHAT: what AWS refused and what to do about it."""
    code, message = error_code(error), error_message(error)
    if code in ACCESS_DENIED:
        return f"{what} was denied ({code}): allow it for the AWS identity running kiln; AWS said: {message}"
    if code in THROTTLED:
        return f"{what} was throttled by AWS ({code}) even after retries: wait a minute and run again"
    if code in BAD_CREDENTIALS:
        return credentials_wording(error)
    if code in CLOCK_SKEW:
        return f"{what}: AWS refused the request's time ({code}): set this machine's clock right (NTP) and run again"
    return f"{what} failed ({code}): {message}"


class AwsCallFailed(Failure):
    """An AWS call was refused or could not be made; str() is one line naming the call and what to do."""


@contextlib.contextmanager
def aws_call(what: str, error: type[Failure] = AwsCallFailed) -> Iterator[None]:
    """Turn a botocore error raised in the block into ERROR, one line naming the AWS call WHAT.

    Missing or rejected credentials raise NoCredentials instead: the command says so in its one wording. ERROR is
    the caller's own kind of failure where it has one (kiln.aws.remote.cluster.RemoteError).
    """
    try:
        yield
    except (ClientError, BotoCoreError) as failed:
        raise_if_no_credentials(failed)
        if isinstance(failed, ClientError):
            raise error(explain(what, failed)) from None
        raise error(f"{what}: {one_line(str(failed))}") from None
