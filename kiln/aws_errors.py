"""AWS's refusals in one line each: the error codes kiln tells apart and the words it uses for them."""

from __future__ import annotations

from botocore.exceptions import ClientError

from kiln.ci.reaper_code.kiln_reaper.teardown import error_code

ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}
THROTTLED = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"}
BAD_CREDENTIALS = {"AuthFailure", "ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "RequestExpired"}


def one_line(text: str, limit: int = 300) -> str:
    """Return TEXT on one line, whitespace collapsed, cut to LIMIT characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error_message(error: ClientError) -> str:
    """Return AWS's own message of ERROR on one line."""
    return one_line(str(error.response.get("Error", {}).get("Message", "")))


def explain(what: str, error: ClientError) -> str:
    """Return one line for ERROR raised by the AWS call WHAT: what AWS refused and what to do about it."""
    code, message = error_code(error), error_message(error)
    if code in ACCESS_DENIED:
        return f"{what} was denied ({code}): allow it for the AWS identity running kiln; AWS said: {message}"
    if code in THROTTLED:
        return f"{what} was throttled by AWS ({code}) even after retries: wait a minute and run again"
    if code in BAD_CREDENTIALS:
        return f"{what}: AWS rejected the credentials ({code}): refresh them (the CI role, or `aws sso login`)"
    return f"{what} failed ({code}): {message}"
