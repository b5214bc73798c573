-- As-of join against an upsert log (what sd.from_upserts turns into a collection).
-- The log's value for a key at time t is the multiset of its non-deleted rows at the
-- key's latest log time s <= t (strict: s < t); so each update of A needs one as-of
-- lookup of s and an equi-join on (key, s), never the log's retractions.
-- a: A consolidated; s: the log's distinct (key, time); v: its non-deleted rows
-- counted per (key, value, time).  $k_lead, $kv_lead, $out_lead, $k_eq and $mv_eq
-- end in a comma (or AND) or are empty: with no key columns the whole log is one
-- timeline and every order meets the latest log time over all of it.
WITH a AS (
    SELECT $a_cols, sum(_d)::BIGINT AS _d FROM $A GROUP BY ALL HAVING sum(_d) <> 0
), s AS (
    SELECT DISTINCT $k_lead _t0 AS _s FROM $H
), v AS (
    SELECT $kv_lead _t0 AS _s, count(*)::BIGINT AS _m FROM $H $live GROUP BY ALL
), m AS (
    SELECT a.*, s._s FROM a ASOF $how JOIN s ON $k_eq a._t0 $cmp s._s
)
SELECT $out_lead m._t0, (m._d * $mult)::BIGINT AS _d
FROM m $how JOIN v ON $mv_eq m._s = v._s
