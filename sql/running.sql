-- Per data row (the whole row is the key), the accumulated multiplicity after each change
-- (_c) and just before it (_p), for a totally ordered time: what dd_threshold and
-- dd_distinct map through their multiplicity function.
WITH cons AS (SELECT $d_cols, $t, sum(_d)::BIGINT AS _d FROM $X GROUP BY ALL HAVING sum(_d) <> 0)
SELECT $d_cols, $t, _c, _c - _d AS _p
FROM (SELECT *, sum(_d) OVER (${d_window} ORDER BY $t ROWS UNBOUNDED PRECEDING) AS _c FROM cons) AS _r
