"""plan functions: the hot statements as PL/pgSQL functions under stable names (store/plans.py)

Created here, not at run time under hash names, so a reviewer reads each function whole and
its versions are the migrations'. PostgreSQL only: SQLite has nothing to plan ahead.
A later migration that changes one lists it again in its own ``FUNCTIONS`` (a changed
argument list: drop the old one first); tests/store/test_plans.py fails until it does, and
``python -m store.migrate`` prints what to write.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

FUNCTIONS = {
    "wakeful_plan_claim": """CREATE OR REPLACE FUNCTION wakeful_plan_claim(VARCHAR(128), BIGINT, BIGINT, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, VARCHAR, VARCHAR, VARCHAR, INTEGER, TEXT, TEXT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN WITH picked AS
(SELECT retry.id AS id
FROM (SELECT candidate.id AS id
FROM events AS candidate
WHERE candidate.inbox = $1::VARCHAR AND (candidate.status = 'pending' AND candidate.not_before <= $2::BIGINT OR candidate.status = 'running' AND candidate.claim_gen < $3::BIGINT) AND candidate.attempts < $4::INTEGER AND candidate.attempts > $5::INTEGER ORDER BY candidate.id
 LIMIT $6::INTEGER) AS retry UNION ALL SELECT fresh.id AS id
FROM (SELECT candidate.id AS id
FROM events AS candidate
WHERE candidate.inbox = $1::VARCHAR AND (candidate.status = 'pending' AND candidate.not_before <= $2::BIGINT OR candidate.status = 'running' AND candidate.claim_gen < $3::BIGINT) AND candidate.attempts < $4::INTEGER AND candidate.attempts = $7::INTEGER AND NOT (EXISTS (SELECT *
FROM events AS candidate
WHERE candidate.inbox = $1::VARCHAR AND (candidate.status = 'pending' AND candidate.not_before <= $2::BIGINT OR candidate.status = 'running' AND candidate.claim_gen < $3::BIGINT) AND candidate.attempts < $4::INTEGER AND candidate.attempts > $5::INTEGER)) ORDER BY candidate.id
 LIMIT $8::INTEGER) AS fresh)
 UPDATE events SET status=CASE WHEN (events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT)) THEN $9::VARCHAR WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN $10::VARCHAR ELSE $11::VARCHAR END, attempts=CASE WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN events.attempts + $12::INTEGER ELSE events.attempts END, claim_gen=CASE WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN $3::BIGINT ELSE events.claim_gen END, error=CASE WHEN (NOT (events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT))) THEN events.error WHEN (events.error IS NULL) THEN $13::VARCHAR ELSE $14::VARCHAR || events.error END, claimed_at=CASE WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN $2::BIGINT ELSE events.claimed_at END, finished=CASE WHEN (events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT)) THEN $2::BIGINT ELSE events.finished END WHERE events.inbox = $1::VARCHAR AND events.status IN ('pending', 'running') AND (events.id IN (SELECT picked.id
FROM picked) OR events.status = 'running' AND events.claim_gen < $3::BIGINT OR events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT)) RETURNING events.id, events.inbox, events.source, events.source_id, events.payload, events.status, events.attempts, events.error, events.created, events.claim_gen, events.finished LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_done": """CREATE OR REPLACE FUNCTION wakeful_plan_done(VARCHAR(16), TEXT, BIGINT, BIGINT[], VARCHAR(128), BIGINT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN UPDATE events SET status=$1::VARCHAR, error=$2::VARCHAR, finished=$3::BIGINT WHERE events.id = ANY ($4::BIGINT[]) AND events.inbox = $5::VARCHAR AND events.status = 'running' AND events.claim_gen = $6::BIGINT RETURNING events.id, events.claimed_at LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_hold_and_done": """CREATE OR REPLACE FUNCTION wakeful_plan_hold_and_done(BIGINT, VARCHAR(128), VARCHAR(16), TEXT, BIGINT[], BIGINT, VARCHAR(255)) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN WITH lease AS
(SELECT inboxes.holder AS holder, inboxes.generation AS generation, inboxes.lease_until AS lease_until, inboxes.last_sent AS last_sent, coalesce($1::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS now
FROM inboxes
WHERE inboxes.inbox = $2::VARCHAR FOR UPDATE),
done AS
(UPDATE events SET status=$3::VARCHAR, error=$4::VARCHAR, finished=(SELECT lease.now
FROM lease) WHERE events.id = ANY ($5::BIGINT[]) AND events.inbox = $2::VARCHAR AND events.status = 'running' AND events.claim_gen = $6::BIGINT AND (EXISTS (SELECT *
FROM lease
WHERE lease.holder = $7::VARCHAR AND lease.generation = $6::BIGINT AND lease.lease_until >= lease.now)) RETURNING events.id, events.claimed_at)
 SELECT lease.holder, lease.generation, lease.lease_until, lease.now, done.id, done.claimed_at
FROM lease LEFT OUTER JOIN done ON true LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_lock": """CREATE OR REPLACE FUNCTION wakeful_plan_lock(BIGINT, VARCHAR(128)) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN SELECT inboxes.holder, inboxes.generation, inboxes.lease_until, inboxes.last_sent, coalesce($1::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS now
FROM inboxes
WHERE inboxes.inbox = $2::VARCHAR FOR UPDATE LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_lock_or_create": """CREATE OR REPLACE FUNCTION wakeful_plan_lock_or_create(VARCHAR(128), BIGINT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN INSERT INTO inboxes (inbox) VALUES ($1::VARCHAR) ON CONFLICT (inbox) DO UPDATE SET inbox = excluded.inbox RETURNING inboxes.holder, inboxes.generation, inboxes.lease_until, inboxes.last_sent, coalesce($2::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS now, EXISTS (SELECT *
FROM memory
WHERE memory.inbox = $1::VARCHAR) AS has_memory LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_log_and_resign_or_extend": """CREATE OR REPLACE FUNCTION wakeful_plan_log_and_resign_or_extend(VARCHAR(128), BIGINT, VARCHAR(255), BIGINT, BIGINT, VARCHAR(16), JSON, TEXT, INTEGER, BIGINT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN WITH run_log AS
(INSERT INTO runs (inbox, generation, holder, started, finished, outcome, event_ids, error) VALUES ($1::VARCHAR, $2::BIGINT, $3::VARCHAR, $4::BIGINT, $5::BIGINT, $6::VARCHAR, $7::JSON, $8::VARCHAR) RETURNING runs.id)
 UPDATE inboxes SET holder=CASE WHEN (NOT (EXISTS (SELECT *
FROM events
WHERE events.inbox = $1::VARCHAR AND (events.status = 'pending' AND events.not_before <= $5::BIGINT OR events.status = 'running' AND events.claim_gen < inboxes.generation)))) THEN NULL ELSE inboxes.holder END, lease_until=CASE WHEN (NOT (EXISTS (SELECT *
FROM events
WHERE events.inbox = $1::VARCHAR AND (events.status = 'pending' AND events.not_before <= $5::BIGINT OR events.status = 'running' AND events.claim_gen < inboxes.generation)))) THEN $9::INTEGER ELSE $10::BIGINT END WHERE inboxes.inbox = $1::VARCHAR RETURNING inboxes.holder LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_log_resign_and_take": """CREATE OR REPLACE FUNCTION wakeful_plan_log_resign_and_take(VARCHAR(128), BIGINT, VARCHAR(255), BIGINT, BIGINT, VARCHAR(16), JSON, TEXT, INTEGER, BIGINT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN WITH run_log AS
(INSERT INTO runs (inbox, generation, holder, started, finished, outcome, event_ids, error) VALUES ($1::VARCHAR, $2::BIGINT, $3::VARCHAR, $4::BIGINT, $5::BIGINT, $6::VARCHAR, $7::JSON, $8::VARCHAR) RETURNING runs.id),
resign AS
(UPDATE inboxes SET holder=CASE WHEN (NOT (EXISTS (SELECT *
FROM events
WHERE events.inbox = $1::VARCHAR AND (events.status = 'pending' AND events.not_before <= $5::BIGINT OR events.status = 'running' AND events.claim_gen < inboxes.generation)))) THEN NULL ELSE inboxes.holder END, lease_until=CASE WHEN (NOT (EXISTS (SELECT *
FROM events
WHERE events.inbox = $1::VARCHAR AND (events.status = 'pending' AND events.not_before <= $5::BIGINT OR events.status = 'running' AND events.claim_gen < inboxes.generation)))) THEN $9::INTEGER ELSE $10::BIGINT END WHERE inboxes.inbox = $1::VARCHAR RETURNING inboxes.holder),
take AS
(SELECT inboxes.inbox AS inbox, inboxes.holder AS holder, inboxes.generation AS generation, inboxes.lease_until AS lease_until, coalesce($5::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS now, EXISTS (SELECT *
FROM memory
WHERE memory.inbox = inboxes.inbox) AS has_memory
FROM inboxes JOIN (SELECT events.inbox AS inbox, events.id AS id
FROM events
WHERE events.status = 'pending' AND events.not_before <= (SELECT coalesce($5::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS coalesce_1) AND NOT (EXISTS (SELECT *
FROM inboxes
WHERE inboxes.inbox = events.inbox AND inboxes.lease_until >= (SELECT coalesce($5::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS coalesce_1))) ORDER BY events.id
 LIMIT 32) AS ready ON inboxes.inbox = ready.inbox
WHERE inboxes.lease_until < (SELECT coalesce($5::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS coalesce_1) AND (SELECT resign.holder
FROM resign) IS NULL ORDER BY ready.id
 LIMIT 1 FOR UPDATE OF inboxes SKIP LOCKED)
 SELECT resign.holder AS kept_by, take.inbox, take.holder, take.generation, take.lease_until, take.now, take.has_memory
FROM resign LEFT OUTER JOIN take ON true LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_resign_or_extend": """CREATE OR REPLACE FUNCTION wakeful_plan_resign_or_extend(VARCHAR(128), BIGINT, INTEGER, BIGINT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN UPDATE inboxes SET holder=CASE WHEN (NOT (EXISTS (SELECT *
FROM events
WHERE events.inbox = $1::VARCHAR AND (events.status = 'pending' AND events.not_before <= $2::BIGINT OR events.status = 'running' AND events.claim_gen < inboxes.generation)))) THEN NULL ELSE inboxes.holder END, lease_until=CASE WHEN (NOT (EXISTS (SELECT *
FROM events
WHERE events.inbox = $1::VARCHAR AND (events.status = 'pending' AND events.not_before <= $2::BIGINT OR events.status = 'running' AND events.claim_gen < inboxes.generation)))) THEN $3::INTEGER ELSE $4::BIGINT END WHERE inboxes.inbox = $1::VARCHAR RETURNING inboxes.holder LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_take": """CREATE OR REPLACE FUNCTION wakeful_plan_take(BIGINT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN SELECT inboxes.inbox, inboxes.holder, inboxes.generation, inboxes.lease_until, coalesce($1::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS now, EXISTS (SELECT *
FROM memory
WHERE memory.inbox = inboxes.inbox) AS has_memory
FROM inboxes JOIN (SELECT events.inbox AS inbox, events.id AS id
FROM events
WHERE events.status = 'pending' AND events.not_before <= (SELECT coalesce($1::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS coalesce_1) AND NOT (EXISTS (SELECT *
FROM inboxes
WHERE inboxes.inbox = events.inbox AND inboxes.lease_until >= (SELECT coalesce($1::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS coalesce_1))) ORDER BY events.id
 LIMIT 32) AS ready ON inboxes.inbox = ready.inbox
WHERE inboxes.lease_until < (SELECT coalesce($1::BIGINT, floor(extract(epoch FROM clock_timestamp()))::bigint) AS coalesce_1) ORDER BY ready.id
 LIMIT 1 FOR UPDATE OF inboxes SKIP LOCKED LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
    "wakeful_plan_take_and_claim": """CREATE OR REPLACE FUNCTION wakeful_plan_take_and_claim(VARCHAR(128), BIGINT, BIGINT, INTEGER, INTEGER, INTEGER, INTEGER, INTEGER, VARCHAR(255), BIGINT, BIGINT, VARCHAR, VARCHAR, VARCHAR, INTEGER, TEXT, TEXT) RETURNS SETOF json LANGUAGE plpgsql VOLATILE AS $wakeful$ DECLARE r record; BEGIN FOR r IN WITH picked AS
(SELECT retry.id AS id
FROM (SELECT candidate.id AS id
FROM events AS candidate
WHERE candidate.inbox = $1::VARCHAR AND (candidate.status = 'pending' AND candidate.not_before <= $2::BIGINT OR candidate.status = 'running' AND candidate.claim_gen < $3::BIGINT) AND candidate.attempts < $4::INTEGER AND candidate.attempts > $5::INTEGER ORDER BY candidate.id
 LIMIT $6::INTEGER) AS retry UNION ALL SELECT fresh.id AS id
FROM (SELECT candidate.id AS id
FROM events AS candidate
WHERE candidate.inbox = $1::VARCHAR AND (candidate.status = 'pending' AND candidate.not_before <= $2::BIGINT OR candidate.status = 'running' AND candidate.claim_gen < $3::BIGINT) AND candidate.attempts < $4::INTEGER AND candidate.attempts = $7::INTEGER AND NOT (EXISTS (SELECT *
FROM events AS candidate
WHERE candidate.inbox = $1::VARCHAR AND (candidate.status = 'pending' AND candidate.not_before <= $2::BIGINT OR candidate.status = 'running' AND candidate.claim_gen < $3::BIGINT) AND candidate.attempts < $4::INTEGER AND candidate.attempts > $5::INTEGER)) ORDER BY candidate.id
 LIMIT $8::INTEGER) AS fresh),
take_lease AS
(UPDATE inboxes SET holder=$9::VARCHAR, generation=$3::BIGINT, lease_until=$10::BIGINT, takeovers=(inboxes.takeovers + $11::BIGINT) WHERE inboxes.inbox = $1::VARCHAR RETURNING inboxes.inbox)
 UPDATE events SET status=CASE WHEN (events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT)) THEN $12::VARCHAR WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN $13::VARCHAR ELSE $14::VARCHAR END, attempts=CASE WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN events.attempts + $15::INTEGER ELSE events.attempts END, claim_gen=CASE WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN $3::BIGINT ELSE events.claim_gen END, error=CASE WHEN (NOT (events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT))) THEN events.error WHEN (events.error IS NULL) THEN $16::VARCHAR ELSE $17::VARCHAR || events.error END, claimed_at=CASE WHEN (events.id IN (SELECT picked.id
FROM picked)) THEN $2::BIGINT ELSE events.claimed_at END, finished=CASE WHEN (events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT)) THEN $2::BIGINT ELSE events.finished END WHERE events.inbox = $1::VARCHAR AND events.status IN ('pending', 'running') AND (events.id IN (SELECT picked.id
FROM picked) OR events.status = 'running' AND events.claim_gen < $3::BIGINT OR events.attempts >= $4::INTEGER AND (events.status = 'pending' OR events.status = 'running' AND events.claim_gen < $3::BIGINT)) RETURNING events.id, events.inbox, events.source, events.source_id, events.payload, events.status, events.attempts, events.error, events.created, events.claim_gen, events.finished LOOP RETURN NEXT to_json(r); END LOOP; END $wakeful$""",
}


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    for create in FUNCTIONS.values():
        conn.exec_driver_sql(create)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    for name in FUNCTIONS:
        conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {name}")
