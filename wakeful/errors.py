"""The one base of every error wakeful raises on purpose.

A caller that wants "any refusal of ours, not a bug" catches ``WakefulError``; each part's
errors (an invalid event, a bad setting, a broken tool config, ...) sit under it, and most
also under the built-in they have always been (``ValueError``), so code that caught that
keeps working. This module is a leaf at the bottom of the house: it imports nothing of ours.
"""

from __future__ import annotations


class WakefulError(Exception):
    """An error wakeful raises on purpose: its message is one line meant for a person."""
