"""What the review page needs, checked before any of it is imported: the ``web`` extra (``MissingExtraError`` otherwise)."""

from agentfsm._extras import extra_needed
from agentfsm.errors import MissingExtraError

with extra_needed("agentfsm.web", "web"):
    from starlette import formparsers

# The decision forms are read by python-multipart, which starlette imports only when it is there.
if vars(formparsers).get("multipart") is None:
    raise MissingExtraError("agentfsm.web", "web", "No module named 'python_multipart'", name="python_multipart")
