-- The index is one graph. Paths are repo-relative so the database can move between
-- checkouts. Every row that extraction writes belongs to one file (file_id), so one
-- file's contribution can be evicted and re-added.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE files (
    id           INTEGER PRIMARY KEY,
    path         TEXT NOT NULL UNIQUE,   -- repo-relative, '/'-separated
    language     TEXT NOT NULL,          -- cpp, cuda, python, yaml, other
    sha          TEXT NOT NULL,          -- blake2b of the content
    size         INTEGER NOT NULL,
    parse_errors INTEGER NOT NULL DEFAULT 0,  -- ERROR regions tree-sitter recovered from
    error        TEXT                     -- why the file could not be indexed, if it could not
);

CREATE TABLE nodes (
    id        INTEGER PRIMARY KEY,
    file_id   INTEGER NOT NULL REFERENCES files(id),
    kind      TEXT NOT NULL,             -- indexer.graph.vocabulary.NodeKind
    name      TEXT NOT NULL,             -- short name: 'matmul'
    qualname  TEXT NOT NULL,             -- 'at::native::matmul', 'torch.nn.Linear'
    line      INTEGER NOT NULL,
    end_line  INTEGER NOT NULL,
    parent_id INTEGER,                   -- enclosing node (file, namespace owner, class)
    attrs     TEXT                       -- JSON object, kind-specific
);

-- What extraction saw: a use of a name. The linker resolves refs into edges.
CREATE TABLE refs (
    id         INTEGER PRIMARY KEY,
    file_id    INTEGER NOT NULL REFERENCES files(id),
    src_id     INTEGER NOT NULL REFERENCES nodes(id),
    kind       TEXT NOT NULL,            -- the edge kind it becomes
    scheme     TEXT NOT NULL,            -- which resolver reads it
    target     TEXT,                     -- the name as written (NULL for local edges)
    target_key TEXT,                     -- last identifier of target, for re-resolution
    target_id  INTEGER,                  -- set for local edges
    line       INTEGER NOT NULL,
    attrs      TEXT
);

-- What the linker concluded. Evidence is the ref's file and line.
CREATE TABLE edges (
    id      INTEGER PRIMARY KEY,
    ref_id  INTEGER REFERENCES refs(id),
    src_id  INTEGER NOT NULL REFERENCES nodes(id),
    dst_id  INTEGER NOT NULL REFERENCES nodes(id),
    kind    TEXT NOT NULL,               -- indexer.graph.vocabulary.EdgeKind
    file_id INTEGER NOT NULL REFERENCES files(id),
    line    INTEGER NOT NULL,
    attrs   TEXT                         -- JSON: {"ambiguous": n} when n candidates remained
);

-- What each module-level statement of a Python file does with the names in it: the
-- impact walk's questions about top-level code, judged at extraction
-- (indexer.python.statement_facts).
CREATE TABLE py_statements (
    file_id  INTEGER NOT NULL REFERENCES files(id),
    line     INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    facts    TEXT NOT NULL               -- JSON object
);
