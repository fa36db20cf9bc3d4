-- A database as mcpbroker left it at schema version 3 (users and API
-- keys, the audit trail, web sessions), before conversations and usage.
-- alice's API key is mcpb_fixtureKEY0AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA;
-- the two audit rows are chained as docs/ARCHITECTURE.md describes.
-- tests/unit/test_conv.c opens it and has it upgraded in place.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE users (  id INTEGER PRIMARY KEY,  name TEXT NOT NULL UNIQUE,  tenant TEXT NOT NULL,  roles TEXT NOT NULL,  key_id TEXT UNIQUE,  key_hash BLOB,  created INTEGER NOT NULL,  key_created INTEGER);
INSERT INTO users VALUES(1,'alice','acme','tenant-admin','fixtureKEY0A',X'f0ca293b018cbf6c0da996235a31c505ec279862225bd4cd1fb9bf32c0af2c0a',1767225600,1767225600);
INSERT INTO users VALUES(2,'bob','default','',NULL,NULL,1767225600,NULL);
CREATE TABLE audit (  id INTEGER PRIMARY KEY,  ts INTEGER NOT NULL,  kind TEXT NOT NULL,  user TEXT,  tenant TEXT,  detail TEXT NOT NULL,  prev_hash BLOB NOT NULL,  hash BLOB NOT NULL);
INSERT INTO audit VALUES(1,1767225600000,'admin',NULL,NULL,'{"op":"user_add","name":"alice","tenant":"acme","roles":"tenant-admin"}',X'0000000000000000000000000000000000000000000000000000000000000000',X'fa6122d4612e323f7218febae67312b7dac4f06471e265607ac260004e224304');
INSERT INTO audit VALUES(2,1767225601000,'admin',NULL,NULL,'{"op":"user_add","name":"bob","tenant":"default","roles":""}',X'fa6122d4612e323f7218febae67312b7dac4f06471e265607ac260004e224304',X'911403b932e1b0ef70faef55a453e254892035b907ca5ce9a808ce8a423e130f');
CREATE TABLE audit_checkpoint (  id INTEGER PRIMARY KEY CHECK (id = 1),  last_id INTEGER,  last_hash BLOB);
INSERT INTO audit_checkpoint VALUES(1,2,X'911403b932e1b0ef70faef55a453e254892035b907ca5ce9a808ce8a423e130f');
CREATE TABLE sessions (  id_hash BLOB PRIMARY KEY,  user TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,  csrf TEXT NOT NULL,  created INTEGER NOT NULL,  last_seen INTEGER NOT NULL,  expires INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX audit_ts ON audit (ts);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN  SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN  SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE INDEX sessions_user ON sessions (user);
CREATE INDEX sessions_expires ON sessions (expires);
PRAGMA user_version = 3;
COMMIT;
