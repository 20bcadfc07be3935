"""The article's eight scenarios, replayed against the store on both engines."""

from article_replay import EXPECTED, normalized, replay

from store import Store


def test_replay_prints_the_articles_raw_output(store: Store) -> None:
    assert normalized(replay(store)) == normalized(EXPECTED)


def test_inboxes_are_independent(store: Store) -> None:
    """The same story in two inboxes of one database: keys, leases, timers and the outbox
    gap are per inbox, so both print the article's output."""
    assert normalized(replay(store, "alice")) == normalized(EXPECTED)
    assert normalized(replay(store, "bob")) == normalized(EXPECTED)
