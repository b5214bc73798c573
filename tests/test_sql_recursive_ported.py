"""Recursive-CTE cases of PostgreSQL's and DuckDB's own test suites, run through sd.sql.

The queries and expected rows come from PostgreSQL's ``src/test/regress/sql/with.sql``
(expected output ``expected/with.out``) and DuckDB's ``test/sql/cte/*.test``, written here
as Python data (tables as keyword DataFrames: plain tables, so the results are plain
rows).  Where the original uses syntax Spark SQL spells differently (PostgreSQL arrays,
``x IS OF (type)``), the case says what was adapted.  ``ORDER BY`` clauses of the outer
query are kept; rows are compared as multisets.

Cases whose original *fails* in PostgreSQL or DuckDB fall in two groups: the misuse that
sd.sql refuses too (``SqlError`` before any Spark job, :data:`ERRORS`), and the forms
sd.sql gives a meaning to (mutual recursion, several references under ``UNION ALL``),
whose expected rows are the ones SQL's iteration defines (DuckDB computes them; see each
case).
"""

from __future__ import annotations

from collections import Counter

import pytest
from spark_support import no_spark_job

import spark_differential as sd
from spark_differential.errors import SqlError

DEPARTMENT = ([(0, None, "ROOT"), (1, 0, "A"), (2, 1, "B"), (3, 2, "C"), (4, 2, "D"), (5, 0, "E"), (6, 4, "F"),
               (7, 5, "G")], "id int, parent_department int, name string")
TREE = ([(1, None), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2), (7, 3), (8, 3), (9, 4), (10, 4), (11, 7), (12, 7),
         (13, 7), (14, 9), (15, 11), (16, 11)], "id int, parent_id int")
EMP = ([(7839, "KING", None), (7698, "BLAKE", 7839), (7782, "CLARK", 7839), (7566, "JONES", 7839),
        (7902, "FORD", 7566), (7369, "SMITH", 7902), (7499, "ALLEN", 7698), (7900, "JAMES", 7698),
        (7934, "MILLER", 7782)], "empno int, ename string, mgr int")
Y = ([(a,) for a in range(1, 11)], "a int")
TABLES = {"department": DEPARTMENT, "tree": TREE, "emp": EMP, "y": Y}

SUBDEPARTMENT_LEVEL = """WITH RECURSIVE subdepartment(level, id, parent_department, name) AS (
    SELECT 1, * FROM department WHERE name = 'A'
    UNION ALL
    SELECT sd.level + 1, d.* FROM department AS d, subdepartment AS sd WHERE d.parent_department = sd.id)"""

# (source, query, expected rows)
CASES = [
    ("pg: sum of 1..100",
     "WITH RECURSIVE t(n) AS (VALUES (1) UNION ALL SELECT n+1 FROM t WHERE n < 100) SELECT sum(n) FROM t",
     [(5050,)]),
    ("pg: scalar subquery in the non-recursive term (SELECT (VALUES(1)) spelled SELECT (SELECT 1))",
     "WITH RECURSIVE t(n) AS (SELECT (SELECT 1) UNION ALL SELECT n+1 FROM t WHERE n < 5) SELECT * FROM t",
     [(1,), (2,), (3,), (4,), (5,)]),
    ("pg: an infinite loop with UNION ALL, but not with UNION",
     "WITH RECURSIVE t(n) AS (SELECT 1 UNION SELECT 10-n FROM t) SELECT * FROM t",
     [(1,), (9,)]),
    ("pg: strings (without the IS OF (text) column)",
     "WITH RECURSIVE t(n) AS (SELECT 'foo' UNION ALL SELECT n || ' bar' FROM t WHERE length(n) < 20) SELECT n FROM t",
     [("foo",), ("foo bar",), ("foo bar bar",), ("foo bar bar bar",), ("foo bar bar bar bar",),
      ("foo bar bar bar bar bar",)]),
    ("pg: departments under 'A'",
     """WITH RECURSIVE subdepartment AS (
            SELECT name as root_name, * FROM department WHERE name = 'A'
            UNION ALL
            SELECT sd.root_name, d.* FROM department AS d, subdepartment AS sd WHERE d.parent_department = sd.id)
        SELECT * FROM subdepartment ORDER BY name""",
     [("A", 1, 0, "A"), ("A", 2, 1, "B"), ("A", 3, 2, "C"), ("A", 4, 2, "D"), ("A", 6, 4, "F")]),
    ("pg: departments under 'A' with a level",
     SUBDEPARTMENT_LEVEL + " SELECT * FROM subdepartment ORDER BY name",
     [(1, 1, 0, "A"), (2, 2, 1, "B"), (3, 3, 2, "C"), (3, 4, 2, "D"), (4, 6, 4, "F")]),
    ("pg: RECURSIVE is ignored if the query has no self-reference",
     "WITH RECURSIVE subdepartment AS (SELECT * FROM department WHERE name = 'A') SELECT * FROM subdepartment",
     [(1, 0, "A")]),
    ("pg: recursive term has sub-UNION",
     """WITH RECURSIVE t(i,j) AS (
            VALUES (1,2)
            UNION ALL
            SELECT t2.i, t.j+1 FROM (SELECT 2 AS i UNION ALL SELECT 3 AS i) AS t2 JOIN t ON (t2.i = t.i+1))
        SELECT * FROM t""",
     [(1, 2), (2, 3), (3, 4)]),
    ("pg: count the paths from second-level nodes (the int[] path as a '/'-separated string: the recursive "
     "term in Spark SQL that runs inside one task)",
     """WITH RECURSIVE t(id, path) AS (
            VALUES (1, '')
            UNION ALL
            SELECT tree.id, t.path || '/' || CAST(tree.id AS STRING) FROM tree JOIN t ON (tree.parent_id = t.id))
        SELECT t1.id, count(*) FROM t AS t1 JOIN t AS t2
            ON (split(t1.path, '/')[1] = split(t2.path, '/')[1] AND size(split(t1.path, '/')) = 2
                AND size(split(t2.path, '/')) > 2)
        GROUP BY t1.id ORDER BY t1.id""",
     [(2, 6), (3, 7)]),
    ("pg: forward reference",
     "WITH RECURSIVE x(id) AS (SELECT * FROM y UNION ALL SELECT id+1 FROM x WHERE id < 5), y(id) AS (values (1)) "
     "SELECT * FROM x",
     [(1,), (2,), (3,), (4,), (5,)]),
    ("pg: two recursive CTEs, LEFT JOIN USING",
     """WITH RECURSIVE x(id) AS (VALUES (1) UNION ALL SELECT id+1 FROM x WHERE id < 5),
                       y(id) AS (VALUES (1) UNION ALL SELECT id+1 FROM y WHERE id < 10)
        SELECT y.*, x.* FROM y LEFT JOIN x USING (id)""",
     [(i, i if i <= 5 else None) for i in range(1, 11)]),
    ("pg: z over y",
     """WITH RECURSIVE x(id) AS (SELECT 1 UNION ALL SELECT id+1 FROM x WHERE id < 3),
                       y(id) AS (SELECT * FROM x UNION ALL SELECT * FROM x),
                       z(id) AS (SELECT * FROM y UNION ALL SELECT id+1 FROM z WHERE id < 10)
        SELECT * FROM z""",
     [(1,)] * 2 + [(2,)] * 4 + [(v,) for v in range(3, 11) for _ in range(6)]),
    ("pg: nested recursive WITH",
     """WITH RECURSIVE t(j) AS (
            WITH RECURSIVE s(i) AS (VALUES (1) UNION ALL SELECT i+1 FROM s WHERE i < 10)
            SELECT i FROM s
            UNION ALL
            SELECT j+1 FROM t WHERE j < 10)
        SELECT * FROM t""",
     [(v,) for v in range(1, 11) for _ in range(v)]),
    ("pg: mutual recursion (PostgreSQL: not implemented; here both CTEs iterate together)",
     """WITH RECURSIVE x (id) AS (SELECT 1 UNION ALL SELECT id+1 FROM y WHERE id < 5),
                       y (id) AS (SELECT 1 UNION ALL SELECT id+1 FROM x WHERE id < 5)
        SELECT * FROM x""",
     [(1,), (2,), (3,), (4,), (5,)]),
    ("pg: two references under UNION ALL (PostgreSQL: not allowed; DuckDB's rows)",
     """WITH RECURSIVE foo(i) AS (VALUES (1) UNION ALL
            SELECT * FROM (SELECT i+1 FROM foo WHERE i < 10 UNION ALL SELECT i+1 FROM foo WHERE i < 5) AS t)
        SELECT * FROM foo""",
     [(1,)] + [(2,)] * 2 + [(3,)] * 4 + [(4,)] * 8 + [(v,) for v in range(5, 11) for _ in range(16)]),
    ("duckdb: column aliases on the references",
     "with recursive t(x) as (select 1 union select zzz+1 from t t1(zzz) where zzz < 3) select zz from t t1(zz) order by zz",
     [(1,), (2,), (3,)]),
    ("duckdb: UNION semantics prevents an infinite loop",
     "with recursive t as (select 1 as x union select x from t) select * from t",
     [(1,)]),
    ("duckdb: strings and multiple columns",
     "with recursive t as (select 1 as x, 'hello' as y union all select x+1, y || '-' || 'hello' from t where x < 3) "
     "select * from t",
     [(1, "hello"), (2, "hello-hello"), (3, "hello-hello-hello")]),
    ("duckdb: two references under UNION ALL",
     "with recursive t as (select 1 as x union all select m.x+f.x from t as m, t as f where m.x < 3) select * from t",
     [(1,), (2,), (4,)]),
    ("duckdb: the CTE read twice by the outer query",
     "with recursive t as (select 1 as x union all select x+1 from t where x < 3) select min(a1.x) from t a1, t a2",
     [(1,)]),
    ("duckdb: an aggregate in the UNION ALL term (each iteration's rows)",
     "with recursive t as (select 1 as x union all select sum(x+1) AS x from t where x < 3 group by x) select * from t",
     [(1,), (2,), (3,)]),
    ("duckdb: the CyberTec tutorial, paths",
     """WITH RECURSIVE ctename AS (
            SELECT empno, ename, ename AS path FROM emp WHERE empno = 7566
            UNION ALL
            SELECT emp.empno, emp.ename, ctename.path || ' -> ' || emp.ename FROM emp JOIN ctename ON emp.mgr = ctename.empno)
        SELECT * FROM ctename""",
     [(7566, "JONES", "JONES"), (7902, "FORD", "JONES -> FORD"), (7369, "SMITH", "JONES -> FORD -> SMITH")]),
    ("duckdb: an inner join on an inequality",
     "WITH RECURSIVE t(x) AS (SELECT 1 UNION ALL SELECT t.x + 1 FROM (VALUES (3)) AS v(p) INNER JOIN t ON t.x < p "
     "WHERE t.x < 3) SELECT * FROM t ORDER BY x",
     [(1,), (2,), (3,)]),
]

# misuse both engines refuse (PostgreSQL's messages in the comments); sd.sql: SqlError before any job
ERRORS = [
    # recursive query "x" does not have the form non-recursive-term UNION [ALL] recursive-term
    ("WITH RECURSIVE x(n) AS (SELECT 1 INTERSECT SELECT n+1 FROM x) SELECT * FROM x", "UNION"),
    ("WITH RECURSIVE x(n) AS (SELECT 1 EXCEPT ALL SELECT n+1 FROM x) SELECT * FROM x", "UNION"),
    ("WITH RECURSIVE x(n) AS (SELECT n FROM x) SELECT * FROM x", "non-recursive term"),
    # recursive reference to query "x" must not appear within an outer join
    ("WITH RECURSIVE x(n) AS (SELECT a FROM y WHERE a = 1 UNION ALL SELECT x.n+1 FROM y LEFT JOIN x ON x.n = y.a "
     "WHERE n < 10) SELECT * FROM x", "NULL side of a LEFT JOIN"),
    ("WITH RECURSIVE x(n) AS (SELECT a FROM y WHERE a = 1 UNION ALL SELECT x.n+1 FROM x RIGHT JOIN y ON x.n = y.a "
     "WHERE n < 10) SELECT * FROM x", "NULL side of a RIGHT JOIN"),
    ("WITH RECURSIVE x(n) AS (SELECT a FROM y WHERE a = 1 UNION ALL SELECT x.n+1 FROM x FULL JOIN y ON x.n = y.a "
     "WHERE n < 10) SELECT * FROM x", "NULL side of a FULL JOIN"),
    # recursive reference to query "x" must not appear within a subquery
    ("WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM x WHERE n IN (SELECT * FROM x)) SELECT * FROM x",
     "inside a subquery"),
    ("WITH RECURSIVE x(id) AS (values (1) UNION ALL SELECT (SELECT * FROM x) FROM x WHERE id < 5) SELECT * FROM x",
     "inside a subquery"),
    # aggregate functions not allowed in a recursive query's recursive term
    ("WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT count(*) FROM x) SELECT * FROM x", "without GROUP BY"),
    # ORDER BY / OFFSET in a recursive query is not implemented (DuckDB: not allowed)
    ("WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM x ORDER BY 1) SELECT * FROM x", "ORDER BY"),
    ("WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM x LIMIT 10 OFFSET 1) SELECT * FROM x", "LIMIT"),
    # recursive reference to query "foo" must not appear within EXCEPT
    ("WITH RECURSIVE foo(i) AS (values (1) UNION ALL (SELECT i+1 FROM foo WHERE i < 10 EXCEPT "
     "SELECT i+1 FROM foo WHERE i < 5)) SELECT * FROM foo", "EXCEPT"),
]


@pytest.fixture(scope="module")
def tables(spark):
    return {name: spark.createDataFrame(rows, schema) for name, (rows, schema) in TABLES.items()}


@pytest.mark.parametrize("source,query,expected", [
    pytest.param(*c, id=c[0].split(" (")[0], marks=[pytest.mark.connect] if c[0].startswith("pg: departments under 'A' with") else [])
    for c in CASES])
def test_ported_case(tables, source: str, query: str, expected: list[tuple]):
    got = sd.sql(query, **tables).collect()
    assert Counter(tuple(r) for r in got) == Counter(expected), source


@pytest.mark.parametrize("query,message", ERRORS, ids=[f"error{i}" for i in range(len(ERRORS))])
def test_ported_error(spark, tables, query: str, message: str):
    with no_spark_job(spark), pytest.raises(SqlError, match=message):
        sd.sql(query, **tables)
