-- Stabbing join for a totally ordered time (seed 000's "trace" formulation of join).
-- For every update p of $P (keys, P data, time, diff) output, at p's time, each row q of
-- $Q with nonzero multiplicity c in Q accumulated at p's time (strictly before p's time
-- when the range condition is the strict one), with diff p.diff * c.
-- Q's accumulation is kept as segments: per (key, Q data) the running sum of consolidated
-- diffs, valid from one change to the next.  Keys and time ranks are packed into one
-- HUGEINT so that DuckDB answers "which segment covers this point" with one range join
-- (IEJoin) instead of pairing every P update with every Q update of its key; a hash
-- collision only adds candidates that the final key equality removes.
WITH
pc AS (SELECT $p_cols, sum(_d)::BIGINT AS _d FROM $P GROUP BY ALL HAVING sum(_d) <> 0),
qc AS (SELECT $q_cols, sum(_d)::BIGINT AS _d FROM $Q GROUP BY ALL HAVING sum(_d) <> 0),
tr AS (SELECT $t, row_number() OVER (ORDER BY $t) AS _r
       FROM (SELECT $t FROM pc UNION SELECT $t FROM qc) AS _u),
qs AS (SELECT qc.*, tr._r AS _r,
              sum(qc._d) OVER (${q_window} ORDER BY tr._r ROWS UNBOUNDED PRECEDING) AS _c,
              lead(tr._r) OVER (${q_window} ORDER BY tr._r) AS _re
       FROM qc JOIN tr USING ($t)),
qi AS (SELECT *, (($q_hash)::HUGEINT << 40) + _r AS _lo,
              (($q_hash)::HUGEINT << 40) + coalesce(_re, 1::BIGINT << 39) AS _hi
       FROM qs WHERE _c <> 0),
pp AS (SELECT pc.*, (($p_hash)::HUGEINT << 40) + tr._r AS _pos FROM pc JOIN tr USING ($t))
SELECT $out_cols, (pp._d * qi._c)::BIGINT AS _d
FROM pp JOIN qi ON $range
WHERE $key_eq
