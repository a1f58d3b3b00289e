"""Fixtures for the quality-gate tests: one hand-written environment whose tools each show one bug class.

The environment follows the generated-code conventions (DATABASE_PATH from the environment, one
`create_engine` at import, `Base.metadata.create_all(engine)`, routes with `operation_id`); its
`initial.db` is written here with plain sqlite3 (user 1 is the current user). Each tool is named after
the status the probe must give it; each task after the verdict the task checks must give it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

SCENARIO = "quality_probe_env"

ENV_CODE = '''
import os
from datetime import datetime

from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, Field
from sqlalchemy import Column, DateTime, ForeignKey, Integer, String, create_engine
from sqlalchemy.orm import declarative_base, sessionmaker

DATABASE_PATH = os.getenv("DATABASE_PATH", "sqlite:///quality_probe.db")
engine = create_engine(DATABASE_PATH, connect_args={"check_same_thread": False})
SessionLocal = sessionmaker(autocommit=False, autoflush=False, bind=engine)
Base = declarative_base()
app = FastAPI(title="Quality probe test environment")

CURRENT_USER_ID = 1


class User(Base):
    __tablename__ = "users"
    id = Column(Integer, primary_key=True)
    username = Column(String, unique=True, nullable=False)
    email = Column(String, nullable=False)


class Project(Base):
    __tablename__ = "projects"
    id = Column(Integer, primary_key=True)
    owner_id = Column(Integer, ForeignKey("users.id"), nullable=False)
    name = Column(String, unique=True, nullable=False)
    region = Column(String, nullable=False)
    deadline = Column(DateTime, nullable=True)
    view_count = Column(Integer, nullable=False, default=0)
    created_at = Column(DateTime, nullable=False, default=datetime.utcnow)


class Note(Base):
    __tablename__ = "notes"
    id = Column(Integer, primary_key=True)
    project_id = Column(Integer, ForeignKey("projects.id"), nullable=False)
    text = Column(String, nullable=False)
    created_at = Column(DateTime, nullable=False)  # no default, and the handler never sets it


Base.metadata.create_all(engine)


class ProjectIn(BaseModel):
    name: str = Field(..., min_length=1, description="Project name (unique)")
    region: str = Field(..., description="Region code such as NA-EAST")


class DeadlineIn(BaseModel):
    deadline: str = Field(..., description="New deadline, e.g. 2024-12-31 00:00:00")


class NoteIn(BaseModel):
    text: str = Field(..., min_length=1, description="Note text")


class RenameIn(BaseModel):
    name: str = Field(..., min_length=1, description="New project name")


def project_dict(p):
    return {"id": p.id, "owner_id": p.owner_id, "name": p.name, "region": p.region, "view_count": p.view_count}


# ok: a list tool
@app.get("/projects", operation_id="list_projects", summary="List projects")
def list_projects(limit: int = Query(50, ge=1, le=100, description="Maximum number of projects")):
    s = SessionLocal()
    try:
        return {"projects": [project_dict(p) for p in s.query(Project).order_by(Project.id).limit(limit)]}
    finally:
        s.close()


# ok: a get-by-id tool that answers 404 for an id that does not exist
@app.get("/projects/{project_id}", operation_id="get_project", summary="Get one project")
def get_project(project_id: int):
    s = SessionLocal()
    try:
        p = s.get(Project, project_id)
        if p is None:
            raise HTTPException(status_code=404, detail="Project not found")
        return project_dict(p)
    finally:
        s.close()


# shadowed: same method and path as get_project, declared after it
@app.get("/projects/{project_id}", operation_id="get_project_summary", summary="Project summary")
def get_project_summary(project_id: int):
    return {"id": project_id, "summary": "never reached"}


# shadowed: /projects/{project_id} (declared above) answers /projects/search
@app.get("/projects/search", operation_id="search_projects", summary="Search projects by name")
def search_projects(q: str = Query(..., description="Text in the project name")):
    s = SessionLocal()
    try:
        return {"projects": [project_dict(p) for p in s.query(Project).filter(Project.name.contains(q))]}
    finally:
        s.close()


# suspicious_empty: compares the lower-cased filter against upper-case stored codes
@app.get("/projects-by-region", operation_id="list_projects_by_region", summary="List projects in a region")
def list_projects_by_region(region: str = Query(..., description="Region code")):
    s = SessionLocal()
    try:
        rows = s.query(Project).filter(Project.region == region.lower()).all()
        return {"projects": [project_dict(p) for p in rows]}
    finally:
        s.close()


# writes_on_read: a GET that updates a counter
@app.get("/projects/{project_id}/view", operation_id="view_project", summary="View a project")
def view_project(project_id: int):
    s = SessionLocal()
    try:
        p = s.get(Project, project_id)
        if p is None:
            raise HTTPException(status_code=404, detail="Project not found")
        p.view_count = (p.view_count or 0) + 1
        s.commit()
        return project_dict(p)
    finally:
        s.close()


# server_error (IntegrityError): a duplicate name crashes instead of answering 409
@app.post("/projects", operation_id="create_project", summary="Create a project", status_code=201)
def create_project(body: ProjectIn):
    s = SessionLocal()
    try:
        p = Project(owner_id=CURRENT_USER_ID, name=body.name, region=body.region)
        s.add(p)
        s.commit()
        s.refresh(p)
        return project_dict(p)
    finally:
        s.close()


# server_error (StatementError): a date string written into a DateTime column
@app.patch("/projects/{project_id}/deadline", operation_id="update_project_deadline", summary="Set a deadline")
def update_project_deadline(project_id: int, body: DeadlineIn):
    s = SessionLocal()
    try:
        p = s.get(Project, project_id)
        if p is None:
            raise HTTPException(status_code=404, detail="Project not found")
        p.deadline = body.deadline
        s.commit()
        return {"id": project_id, "deadline": body.deadline}
    finally:
        s.close()


# server_error (IntegrityError, NOT NULL): notes.created_at is never filled
@app.post("/projects/{project_id}/notes", operation_id="create_note", summary="Add a note to a project",
          status_code=201)
def create_note(project_id: int, body: NoteIn):
    s = SessionLocal()
    try:
        if s.get(Project, project_id) is None:
            raise HTTPException(status_code=404, detail="Project not found")
        n = Note(project_id=project_id, text=body.text)
        s.add(n)
        s.commit()
        return {"id": n.id, "project_id": project_id, "text": body.text}
    finally:
        s.close()


# server_error (DetachedInstanceError): attributes expired by commit, read after close
@app.put("/projects/{project_id}", operation_id="rename_project", summary="Rename a project")
def rename_project(project_id: int, body: RenameIn):
    s = SessionLocal()
    p = s.get(Project, project_id)
    if p is None:
        s.close()
        raise HTTPException(status_code=404, detail="Project not found")
    p.name = body.name
    s.commit()
    s.close()
    return {"id": p.id, "name": p.name}


# server_error_on_edge: no not-found check (AttributeError on None for an id that does not exist)
@app.get("/users/{user_id}", operation_id="get_user", summary="Get a user")
def get_user(user_id: int):
    s = SessionLocal()
    try:
        u = s.query(User).filter(User.id == user_id).first()
        return {"id": u.id, "username": u.username, "email": u.email}
    finally:
        s.close()
'''

SCHEMA = """
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    email TEXT NOT NULL
);
CREATE TABLE projects (
    id INTEGER PRIMARY KEY,
    owner_id INTEGER NOT NULL REFERENCES users(id),
    name TEXT NOT NULL UNIQUE,
    region TEXT NOT NULL,
    deadline DATETIME,
    view_count INTEGER NOT NULL DEFAULT 0,
    created_at DATETIME NOT NULL
);
CREATE TABLE notes (
    id INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    text TEXT NOT NULL,
    created_at DATETIME NOT NULL
);
-- Written by no tool at all (no ORM class): a task that needs a change here is blocked.
CREATE TABLE badges (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    name TEXT NOT NULL
);
"""

ROWS = {
    "users": [(1, "alice", "alice@example.com"), (2, "bob", "bob@example.com"), (3, "carol", "carol@example.com")],
    "projects": [
        (1, 1, "Apollo", "NA-EAST", "2024-09-30 00:00:00.000000", 0, "2024-01-05 09:00:00.000000"),
        (2, 1, "Borealis", "EU-WEST", "2024-10-31 00:00:00.000000", 3, "2024-02-11 10:30:00.000000"),
        (3, 2, "Cascade", "NA-EAST", None, 1, "2024-03-20 14:15:00.000000"),
    ],
    "notes": [(1, 1, "Kick-off done", "2024-01-06 08:00:00.000000"),
              (2, 2, "Waiting on legal", "2024-02-12 12:00:00.000000")],
    "badges": [(1, 1, "early-adopter")],
}

# The statuses the probe must give each tool.
EXPECTED_TOOL_STATUS = {
    "list_projects": "ok",
    "get_project": "ok",
    "get_project_summary": "shadowed",
    "search_projects": "shadowed",
    "list_projects_by_region": "suspicious_empty",
    "view_project": "writes_on_read",
    "create_project": "server_error",
    "update_project_deadline": "server_error",
    "create_note": "server_error",
    "rename_project": "server_error",
    "get_user": "server_error_on_edge",
}

_OK_VERIFIER = '''
import sqlite3


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(final_db_path)
    try:
        n = conn.execute("SELECT COUNT(*) FROM projects WHERE name = ? AND region = ? AND owner_id = 1",
                         ("Quality Gate Rollout", "NA-EAST")).fetchone()[0]
    finally:
        conn.close()
    return {"result": "complete" if n == 1 else "others"}
'''

_VACUOUS_VERIFIER = '''
import sqlite3


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(final_db_path)
    try:
        n = conn.execute("SELECT COUNT(*) FROM projects WHERE owner_id = 1").fetchone()[0]
    finally:
        conn.close()
    return {"result": "complete" if n >= 0 else "others"}
'''

_CRASH_VERIFIER = '''
import sqlite3


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(final_db_path)
    try:
        rows = conn.execute("SELECT id FROM milestones WHERE project_id = 1").fetchall()
    finally:
        conn.close()
    return {"result": "complete" if rows else "others"}
'''

_BLOCKED_VERIFIER = '''
import sqlite3


def _badges(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM badges WHERE user_id = 1").fetchone()[0]
    finally:
        conn.close()


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    return {"result": "complete" if _badges(final_db_path) > _badges(initial_db_path) else "others"}
'''

_UNSOLVABLE_VERIFIER = '''
import sqlite3


def verify_task_completion(initial_db_path, final_db_path, final_answer=None):
    conn = sqlite3.connect(final_db_path)
    try:
        n = conn.execute("SELECT COUNT(*) FROM projects WHERE name = 'Apollo II' AND id = 1").fetchone()[0]
    finally:
        conn.close()
    return {"result": "complete" if n == 1 else "others"}
'''

# The two determinism runs of one verifier go to two different sandbox workers (run_verifiers with
# workers=2 deals jobs out round-robin and every job is queued twice in a row), and both workers have
# run the same jobs before; so a code-mode verdict cannot be made to differ between them with
# certainty. Sql-mode evidence is compared whole, and each sandbox copies the databases into its
# own mkdtemp folder: evidence that carries the path it was given (and a clock reading) always differs.
_NONDETERMINISTIC_VERIFIER = '''
import sqlite3
import time


def verify_task(initial_db_path, final_db_path):
    conn = sqlite3.connect(final_db_path)
    try:
        n = conn.execute("SELECT COUNT(*) FROM notes").fetchone()[0]
    finally:
        conn.close()
    return {"notes": n, "checked_at_ns": time.time_ns(), "checked_file": final_db_path}
'''

TASKS = [
    ("Create a project named 'Quality Gate Rollout' in region NA-EAST.", _OK_VERIFIER, "verify_task_completion"),
    ("Tell me how many projects I own.", _VACUOUS_VERIFIER, "verify_task_completion"),
    ("Add a milestone to project Apollo.", _CRASH_VERIFIER, "verify_task_completion"),
    ("Award me a second badge.", _BLOCKED_VERIFIER, "verify_task_completion"),
    ("Rename project Apollo to 'Apollo II'.", _UNSOLVABLE_VERIFIER, "verify_task_completion"),
    ("Count the notes on my projects.", _NONDETERMINISTIC_VERIFIER, "verify_task"),
]
EXPECTED_TASK_VERDICT = ["ok", "vacuous", "crash", "blocked", "unsolvable", "nondeterministic"]

SOLUTIONS = {"tasks": [
    {"task_idx": 0, "calls": [{"tool": "create_project",
                               "arguments": {"name": "Quality Gate Rollout", "region": "NA-EAST"}}],
     "final_answer": "Created the project."},
    # Runs cleanly but never renames anything: the verifier still says "others".
    {"task_idx": 4, "calls": [{"tool": "list_projects", "arguments": {}},
                              {"tool": "get_project", "arguments": {"project_id": 1}}],
     "final_answer": "Apollo is now called Apollo II."},
]}


def write_initial_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(SCHEMA)
        for table, rows in ROWS.items():
            marks = ", ".join("?" * len(rows[0]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        conn.commit()
    finally:
        conn.close()


def write_scenario(root: Path, name: str = SCENARIO) -> Path:
    """The test environment as a stored scenario under `root` (an ArtifactStore root)."""
    folder = root / "scenarios" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.json").write_text(json.dumps({"name": name}))
    (folder / "server.py").write_text(ENV_CODE)
    write_initial_db(folder / "initial.db")
    (folder / "tasks.json").write_text(json.dumps({"tasks": [t for t, _, _ in TASKS]}))
    (folder / "verifiers.json").write_text(json.dumps({"verifiers": [
        {"task_idx": i, "task": t, "code": code, "functions": [fn]} for i, (t, code, fn) in enumerate(TASKS)]}))
    (folder / "solutions.json").write_text(json.dumps(SOLUTIONS))
    return folder


@pytest.fixture(scope="module")
def quality_store(tmp_path_factory):
    from awm_resources.store import ArtifactStore

    root = tmp_path_factory.mktemp("quality_store")
    write_scenario(root)
    return ArtifactStore(root)


@pytest.fixture(scope="module")
def quality_result(quality_store):
    """`scenario_quality` of the test environment (run once per module: it starts worker processes)."""
    from awm_rl.quality.gate import scenario_quality

    return scenario_quality(quality_store, SCENARIO)
