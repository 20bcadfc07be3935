"""Shared by the hostile-input tests."""

# The approval links' key in the processes the tests start (WAKEFUL_APPROVAL_SECRET).
APPROVAL_SECRET = "hostile-approval-secret"
