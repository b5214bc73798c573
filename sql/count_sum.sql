-- dd_count / dd_sum over an integral or decimal column, totally ordered time.
-- Only rows with positive accumulated multiplicity count.  Per (key, data) the running
-- multiplicity c changes the positive part by greatest(c,0) - greatest(c - d, 0); per key,
-- running sums of those changes give the count, the sum and the number of non-null values
-- at each of the key's times.  _n* is the key's next time (for snapshot_diffs).
WITH cons AS (SELECT $kd_cols, $t, sum(_d)::BIGINT AS _d FROM $X GROUP BY ALL HAVING sum(_d) <> 0),
rc AS (SELECT *, sum(_d) OVER (${kd_window} ORDER BY $t ROWS UNBOUNDED PRECEDING) AS _c FROM cons),
dl AS (SELECT $k_cols, $t, greatest(_c, 0) - greatest(_c - _d, 0) AS _dp, $val AS _v FROM rc),
kt AS (SELECT $k_cols, $t, sum(_dp)::HUGEINT AS _dn, sum(_dp * _v) AS _ds,
              sum(CASE WHEN _v IS NULL THEN 0 ELSE _dp END)::HUGEINT AS _dnn
       FROM dl GROUP BY ALL)
SELECT $k_cols, $t, $n_lead,
       sum(_dn) OVER (${k_window} ORDER BY $t ROWS UNBOUNDED PRECEDING) AS _cnt,
       sum(_ds) OVER (${k_window} ORDER BY $t ROWS UNBOUNDED PRECEDING) AS _sum,
       sum(_dnn) OVER (${k_window} ORDER BY $t ROWS UNBOUNDED PRECEDING) AS _nn
FROM kt
