-- Snapshots to differences for a totally ordered time.
-- $S holds rows of a key's full output at one of the key's times (_t*), with multiplicity
-- _m, together with the key's next time (_n*, null at the key's last time).  A snapshot
-- holds until the next time, so it contributes +_m at its time and -_m at the next one;
-- equal consecutive snapshots cancel when summed.
SELECT $cols, $t, sum(_m)::BIGINT AS _d FROM (
  SELECT $cols, $t, _m FROM $S
  UNION ALL
  SELECT $cols, $n_as_t, -_m AS _m FROM $S WHERE _n0 IS NOT NULL
) AS _u
GROUP BY ALL
HAVING sum(_m) <> 0
