-- Consolidate a history as of a frontier.
-- Every time is advanced by the frontier (meet over frontier elements f of join(t, f));
-- then diffs are summed per (data, advanced time) and zero sums dropped.
-- $select: data columns, then the advanced time leaves aliased _t0.._tn
SELECT $select, sum(_d)::BIGINT AS _d
FROM $X
GROUP BY ALL
HAVING sum(_d) <> 0
