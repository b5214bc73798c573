-- Pairwise join for any lattice: every pair of updates with equal keys meets at the
-- lattice join (least upper bound) of their times with the product of their diffs.
-- Inside an iteration, pairs of two old (trace) updates were already accounted for.
SELECT $out_cols, $time_join, sum(a._d * b._d)::BIGINT AS _d
FROM $A AS a JOIN $B AS b ON $key_eq
WHERE a._new OR b._new
GROUP BY ALL
HAVING sum(a._d * b._d) <> 0
