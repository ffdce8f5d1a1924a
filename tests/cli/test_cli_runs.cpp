// The tessera command line's runs, as a user keeps them: the run store (list, show, export, edit, delete, another
// program's database, readers, locks), checkpoints and resume, sweeps, and runs that stop or die (Ctrl-C, a closed
// stdout, SIGKILL, a failed start).
#include <QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <QThread>

#include <sqlite3.h>
#include <unistd.h>

#include <csignal>
#include <functional>

#include "tests/cli/cli_test_util.h"

using namespace tsr::test;

namespace {

// tessera run by a user who may not write what this test made: the test's own user where it is not root (the
// folder and files are then made read-only to it), else nobody (root may write any file whatever its mode).
Run tesseraAsReader(const QStringList& args) {
  QProcess p;
  if (::geteuid() == 0)
    p.setChildProcessModifier([] {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(125);
    });
  p.start(TESSERA_BIN, args);
  return finished(p);
}

QByteArray bytesOf(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Run `run`'s training losses, step by step, as SQLite reads them from the store (not through tessera).
QList<QPair<qint64, double>> lossesOf(const QString& dbPath, int run) {
  QList<QPair<qint64, double>> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(dbPath.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT step, value FROM metrics WHERE run = ? AND key = 'loss' ORDER BY step", -1, &st,
                           nullptr) == SQLITE_OK) {
      sqlite3_bind_int(st, 1, run);
      while (sqlite3_step(st) == SQLITE_ROW) out.append({sqlite3_column_int64(st, 0), sqlite3_column_double(st, 1)});
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

// Rewrites run 1's record of its process (run/process.json) as a process on another machine sharing the store
// (pid 4242 on other-machine), whose pid cannot be asked from here; whether the record was there.
bool recordProcessElsewhere(const QString& dbPath) {
  sqlite3* db = nullptr;
  bool changed = false;
  if (sqlite3_open(dbPath.toUtf8().constData(), &db) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 30000);
    const char* elsewhere = "UPDATE artifacts SET data = '{\"host\": \"other-machine\", \"pid\": 4242, \"boot_id\": "
                            "\"x\", \"start_ticks\": 1}' WHERE run = 1 AND name = 'run/process.json'";
    changed = sqlite3_exec(db, elsewhere, nullptr, nullptr, nullptr) == SQLITE_OK && sqlite3_changes(db) == 1;
  }
  sqlite3_close(db);
  return changed;
}

void setMode(const QString& path, QFileDevice::Permissions mode) { QVERIFY(QFile::setPermissions(path, mode)); }

constexpr QFileDevice::Permissions kReadOnly = QFileDevice::ReadOwner | QFileDevice::ReadGroup | QFileDevice::ReadOther;
constexpr QFileDevice::Permissions kReadOnlyFolder =
    kReadOnly | QFileDevice::ExeOwner | QFileDevice::ExeGroup | QFileDevice::ExeOther;
constexpr QFileDevice::Permissions kOpenFolder = kReadOnlyFolder | QFileDevice::WriteOwner | QFileDevice::WriteGroup |
                                                 QFileDevice::WriteOther;

}  // namespace

class TestCliRuns : public QObject {
  Q_OBJECT
 private slots:
  void trainThenListShowAndExportRuns() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QString db = dir.filePath("store.db");
    Run t = tessera({"train", dir.path(), "--db", db});
    QCOMPARE(t.exitCode, 0);
    QVERIFY2(t.out.contains(QRegularExpression("step +6/6 \\| loss [0-9.]+ .*\\| ETA \\d+s")), qPrintable(t.out));
    QVERIFY(QFile::exists(db));

    Run list = tessera({"runs", "--db", db, "list"});
    QCOMPARE(list.exitCode, 0);
    QVERIFY2(list.out.contains(QRegularExpression("\\n +1  tiny_mlp .* finished +6 +[0-9]+\\.[0-9]{4}  ")),
             qPrintable(list.out));
    QVERIFY(list.out.contains("1 runs in"));

    Run show = tessera({"runs", "--db", db, "show", "1"});
    QCOMPARE(show.exitCode, 0);
    QVERIFY2(show.out.contains(QRegularExpression("\\n  loss +6 ")), qPrintable(show.out));
    QVERIFY(show.out.contains("val_loss"));
    QVERIFY(show.out.contains(QRegularExpression("train\\.batch_size +8\\n")));

    Run csv = tessera({"runs", "--db", db, "export", "1", "--csv"});
    QCOMPARE(csv.exitCode, 0);
    QStringList lines = csv.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.front(), QString("run,step,key,value,time"));
    QCOMPARE(lines.filter(QRegularExpression("^1,\\d+,loss,")).size(), 6);
    QVERIFY(lines.filter(QRegularExpression("^1,1,loss,")).size() == 1);
    QString out = dir.filePath("metrics.csv");
    QCOMPARE(tessera({"runs", "--db", db, "export", "1", "--csv", "--out", out}).exitCode, 0);
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), csv.out);

    // --project reads PROJECT/runs.db; the run went to --db, so there is none.
    Run none = tessera({"runs", "--project", dir.path(), "list"});
    QCOMPARE(none.exitCode, 1);
    QVERIFY2(none.err.contains("no run store at"), qPrintable(none.err));
    Run unknown = tessera({"runs", "--db", db, "show", "42"});
    QCOMPARE(unknown.exitCode, 1);
    QVERIFY2(unknown.err.contains("no run 42"), qPrintable(unknown.err));
    QCOMPARE(tessera({"runs", "--db", db, "export", "42", "--csv"}).exitCode, 1);
  }

  // A 3x2 grid makes 6 runs, each tagged with the sweep and its values, each trained with its overrides.
  void sweepGridMakesTaggedRuns() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    Run sweep = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3,3e-3,1e-2", "--grid", "train.batch_size=4,8",
                         "--steps", "2", "--name", "grid1", "--parallel", "2"});
    auto logs = [&] {
      QString all;
      QDir logDir(dir.filePath(".tessera/sweeps/grid1"));
      for (const QString& f : logDir.entryList(QDir::Files)) {
        QFile file(logDir.filePath(f));
        if (file.open(QIODevice::ReadOnly)) all += "\n--- " + f + "\n" + QString::fromUtf8(file.readAll());
      }
      return all;
    };
    QVERIFY2(sweep.exitCode == 0, qPrintable(sweep.out + sweep.err + logs()));
    QVERIFY2(sweep.out.contains("6 runs tagged sweep=grid1"), qPrintable(sweep.out));
    Run list = tessera({"runs", "--project", dir.path(), "list", "--tag", "sweep=grid1"});
    QCOMPARE(list.exitCode, 0);
    QVERIFY2(list.out.contains("6 runs in"), qPrintable(list.out));
    QCOMPARE(list.out.count("#sweep=grid1"), 6);
    QCOMPARE(list.out.count("#train.lr=3e-3"), 2);
    QCOMPARE(list.out.count("#train.batch_size=4"), 3);
    // Each run trained with its own values: the run store records them as the run's settings.
    QSet<QString> seen;
    for (int id = 1; id <= 6; ++id) {
      Run show = tessera({"runs", "--project", dir.path(), "show", QString::number(id)});
      QCOMPARE(show.exitCode, 0);
      auto lr = QRegularExpression("train\\.lr +(\\S+)\\n").match(show.out).captured(1);
      auto batch = QRegularExpression("train\\.batch_size +(\\S+)\\n").match(show.out).captured(1);
      QVERIFY2(show.out.contains(QRegularExpression("train\\.steps +2\\n")), qPrintable(show.out));
      seen.insert(lr + " " + batch);
    }
    QCOMPARE(seen, (QSet<QString>{"0.001 4", "0.001 8", "0.003 4", "0.003 8", "0.01 4", "0.01 8"}));
    // A bad point is refused before any run starts.
    Run bad = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3,-1", "--name", "bad"});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.contains("--set train.lr=-1 (over"), qPrintable(bad.err));
    QCOMPARE(tessera({"runs", "--project", dir.path(), "list", "--tag", "sweep=bad"}).out.count("#sweep=bad"), 0);
    // Random draws from a log range: N runs, each value inside the range.
    Run random = tessera({"sweep", dir.path(), "--random", "2", "--range", "train.lr=1e-4:1e-2:log", "--steps", "1",
                          "--name", "rnd"});
    QVERIFY2(random.exitCode == 0, qPrintable(random.out + random.err));
    QVERIFY2(random.out.contains("2 runs tagged sweep=rnd"), qPrintable(random.out));
  }

  // Runs are renamed, tagged, annotated, archived and deleted with their checkpoints; metrics export as CSV
  // and JSON Lines; --set reaches every command; eval reads a run by number.
  void runsAreEditedExportedAndDeleted() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    Run second = tessera({"train", dir.path(), "--quiet", "--set", "train.lr=5e-3", "--set", "train.steps=3"});
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-2/latest.safetensors")));
    auto runs = [&](const QStringList& args) { return tessera(QStringList{"runs", "--project", dir.path()} + args); };
    QCOMPARE(runs({"rename", "2", "short-lr5e-3"}).exitCode, 0);
    QCOMPARE(runs({"tag", "2", "keep", "lr"}).exitCode, 0);
    QCOMPARE(runs({"untag", "2", "lr"}).exitCode, 0);
    QCOMPARE(runs({"note", "2", "lower lr, fewer steps"}).exitCode, 0);
    Run show = runs({"show", "2"});
    QVERIFY2(show.out.startsWith("run 2: short-lr5e-3 (finished)"), qPrintable(show.out));
    QVERIFY2(show.out.contains("tags     keep\n"), qPrintable(show.out));
    QVERIFY2(show.out.contains("notes    lower lr, fewer steps\n"), qPrintable(show.out));
    QVERIFY2(show.out.contains(QRegularExpression("train\\.lr +0\\.005\\n")), qPrintable(show.out));
    QVERIFY2(show.out.contains(QRegularExpression("run\\.overrides +train\\.lr=5e-3 train\\.steps=3\\n")), qPrintable(show.out));
    QVERIFY2(show.out.contains("config/resolved.toml"), qPrintable(show.out));
    QCOMPARE(runs({"tag", "9", "x"}).exitCode, 1);

    // Export: CSV of two runs, JSON Lines with one object per run and step.
    Run csv = runs({"export", "1", "2"});
    QCOMPARE(csv.exitCode, 0);
    QCOMPARE(csv.out.split('\n', Qt::SkipEmptyParts).filter(QRegularExpression("^[12],\\d+,loss,")).size(), 6 + 3);
    Run jsonl = runs({"export", "--jsonl"});
    QCOMPARE(jsonl.exitCode, 0);
    QStringList objects = jsonl.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(objects.size(), 6 + 3);
    QJsonObject first = QJsonDocument::fromJson(objects.front().toUtf8()).object();
    QCOMPARE(first["run"].toInt(), 1);
    QCOMPARE(first["step"].toInt(), 1);
    QVERIFY(first.contains("loss") && first.contains("lr") && first.contains("grad_norm"));

    // eval by run number; a run without a checkpoint names those that have one.
    Run e1 = tessera({"eval", dir.path(), "--run", "1"});
    QVERIFY2(e1.exitCode == 0 && e1.out.contains("checkpoints/run-1/latest.safetensors"), qPrintable(e1.out + e1.err));
    Run e7 = tessera({"eval", dir.path(), "--run", "7"});
    QCOMPARE(e7.exitCode, 1);
    QVERIFY2(e7.err.contains("runs with one: 1, 2"), qPrintable(e7.err));
    Run badSet = tessera({"model-info", dir.path(), "--set", "model.sizes=[16]"});
    QCOMPARE(badSet.exitCode, 1);
    QVERIFY2(badSet.err.contains("--set model.sizes=[16] (over"), qPrintable(badSet.err));

    // Archive hides a run from the list; delete needs --yes when no one can be asked, then takes the checkpoints.
    QCOMPARE(runs({"archive", "1"}).exitCode, 0);
    QVERIFY(runs({"list"}).out.contains("1 runs in"));
    QVERIFY(runs({"list", "--all"}).out.contains("(archived)"));
    Run refused = runs({"delete", "1"});
    QCOMPARE(refused.exitCode, 1);
    QVERIFY2(refused.err.contains("confirm with --yes"), qPrintable(refused.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    Run deleted = runs({"delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
    QVERIFY(!QFileInfo::exists(dir.filePath("checkpoints/run-1")));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-2/latest.safetensors")));
    QVERIFY(runs({"list", "--all"}).out.contains("1 runs in"));

    // --resume N continues that run; a stopped run resumes to the end.
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--stop-at", "2"}).exitCode, 0);
    Run resumed = tessera({"train", dir.path(), "--quiet", "--resume", "3"});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("resumed run 3 at step 2"), qPrintable(resumed.out + resumed.err));
  }

  // A checkpoint folder is its run's own: a run of another store (--db), or of a runs.db deleted since, with the
  // same number gets a folder of its own, and eval, resume and delete never use or remove another run's files.
  void checkpointFoldersBelongToTheirRun() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    const QString other = dir.filePath("other.db");
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    Run second = tessera({"train", dir.path(), "--quiet", "--steps", "3", "--db", other});
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QStringList folders = QDir(dir.filePath("checkpoints")).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    QCOMPARE(folders.size(), 2);
    const QString otherFolder = folders.filter(QRegularExpression("^run-1-")).value(0);
    QVERIFY2(!otherFolder.isEmpty(), qPrintable(folders.join(' ')));
    Run e1 = tessera({"eval", dir.path(), "--run", "1"});
    QVERIFY2(e1.exitCode == 0 && e1.out.contains("checkpoints/run-1/latest.safetensors"), qPrintable(e1.out + e1.err));
    Run eOther = tessera({"eval", dir.path(), "--run", "1", "--db", other});
    QVERIFY2(eOther.exitCode == 0 && eOther.out.contains(otherFolder + "/latest.safetensors"), qPrintable(eOther.out + eOther.err));
    Run resumed = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--steps", "4", "--db", other});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("resumed run 1 at step 3 from") &&
                 resumed.out.contains(otherFolder), qPrintable(resumed.out + resumed.err));
    // Deleting the other store's run 1 leaves runs.db's run 1 its checkpoints.
    Run deleted = tessera({"runs", "--db", other, "delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    QVERIFY(!QFileInfo::exists(dir.filePath("checkpoints/" + otherFolder)));

    // A new runs.db: its run 1 neither reads nor deletes the old run 1's folder.
    for (const char* f : {"runs.db", "runs.db-wal", "runs.db-shm"}) QFile::remove(dir.filePath(f));
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    Run eNew = tessera({"eval", dir.path(), "--run", "1"});
    QVERIFY2(eNew.exitCode == 0 && !eNew.out.contains("checkpoints/run-1/latest"), qPrintable(eNew.out + eNew.err));
    // A folder whose owner file names another run is refused, not read.
    folders = QDir(dir.filePath("checkpoints")).entryList(QDir::Dirs | QDir::NoDotAndDotDot).filter(QRegularExpression("^run-1-"));
    QCOMPARE(folders.size(), 1);
    writeFile(dir.filePath("checkpoints/" + folders[0] + "/owner.txt"), "owner = 0123456789abcdef\n");
    Run foreign = tessera({"eval", dir.path(), "--run", "1"});
    QCOMPARE(foreign.exitCode, 1);
    QVERIFY2(foreign.err.contains("belongs to another run"), qPrintable(foreign.err));
    QCOMPARE(tessera({"runs", "--project", dir.path(), "delete", "1", "--yes"}).exitCode, 0);
    QVERIFY(QFile::exists(dir.filePath("checkpoints/" + folders[0] + "/latest.safetensors")));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
  }

  // --resume continues the run with the configuration it was started with (its --steps and --set), whatever
  // project.toml says now; a --set that would change it is refused.
  void resumeKeepsTheRunsConfiguration() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "5", "--set", "train.lr=3e-3", "--set",
                      "train.schedule=cosine", "--stop-at", "2"}).exitCode, 0);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "5", "--set", "train.lr=3e-3", "--set",
                      "train.schedule=cosine"}).exitCode, 0);
    Run refused = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--set", "train.lr=1e-1"});
    QCOMPARE(refused.exitCode, 1);
    QVERIFY2(refused.err.contains("train.lr = 0.1 (the run has 0.003)"), qPrintable(refused.err));
    QByteArray toml(kTinyMlp);
    writeFile(dir.filePath("project.toml"), toml.replace("steps = 6", "steps = 9"));
    Run resumed = tessera({"train", dir.path(), "--resume", "1", "--set", "train.log_every=1"});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("step     5/5") && !resumed.out.contains("/9"),
             qPrintable(resumed.out + resumed.err));
    QVERIFY2(resumed.out.contains("project.toml has changed since run 1 started: train.steps = 9 (the run has 5);"), qPrintable(resumed.out));
    // The resumed run's learning rates are the uninterrupted run's.
    Run csv = tessera({"runs", "--project", dir.path(), "export", "1", "2"});
    QStringList lr1 = csv.out.split('\n').filter(QRegularExpression("^1,\\d+,lr,"));
    QStringList lr2 = csv.out.split('\n').filter(QRegularExpression("^2,\\d+,lr,"));
    QCOMPARE(lr1.size(), 5);
    for (int i = 0; i < 5; ++i) QCOMPARE(lr1[i].section(',', 1, 3), lr2[i].section(',', 1, 3));
  }

  // An output file never replaces the run store (or its -wal) or a run's checkpoint.
  void outputsNeverReplaceRunFiles() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    const QByteArray latest = [&] {
      QFile f(dir.filePath("checkpoints/run-1/latest.safetensors"));
      return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }();
    auto runs = [&](const QStringList& args) { return tessera(QStringList{"runs", "--project", dir.path()} + args); };
    for (const char* out : {"runs.db", "runs.db-wal", "runs.db-leases", "checkpoints/run-1/latest.safetensors"}) {
      Run r = runs({"export", "--out", dir.filePath(out)});
      QCOMPARE(r.exitCode, 1);
      QVERIFY2(r.err.contains("write to another file"), qPrintable(r.err));
    }
    Run trace = tessera({"profile", dir.path(), "--steps", "1", "--warmup", "0", "--quiet", "--trace", dir.filePath("runs.db")});
    QCOMPARE(trace.exitCode, 1);
    QVERIFY2(trace.err.contains("is the run store"), qPrintable(trace.err));
    QFile f(dir.filePath("checkpoints/run-1/latest.safetensors"));
    QVERIFY(f.open(QIODevice::ReadOnly) && f.readAll() == latest);
    QVERIFY(runs({"show", "1"}).out.startsWith("run 1: tiny_mlp (finished)"));
    Run csv = runs({"export", "--out", dir.filePath("m.csv")});
    QCOMPARE(csv.exitCode, 0);
    QVERIFY(QFile::exists(dir.filePath("m.csv")));
  }

  // Another program's SQLite file given as --db is refused by the commands that write runs, and left byte for byte
  // as it was (it used to get Tessera's tables and WAL mode).
  void anotherProgramsDatabaseIsNotARunStore() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    const QString foreign = dir.filePath("other.sqlite");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(foreign.toUtf8().constData(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES('mine')", nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    auto bytes = [](const QString& path) {
      QFile f(path);
      return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    const QByteArray before = bytes(foreign);
    for (const QStringList& args : QList<QStringList>{{"train", dir.path(), "--quiet"},
                                                      {"sweep", dir.path(), "--grid", "train.lr=1e-2"},
                                                      {"profile", dir.path(), "--steps", "1", "--warmup", "0"}}) {
      Run r = tessera(args + QStringList{"--db", foreign});
      QVERIFY2(r.exitCode == 1, qPrintable(args.join(' ')));
      QVERIFY2(r.err.contains(foreign + ": not a Tessera run store (it holds another program's tables: notes)"),
               qPrintable(r.err));
      QCOMPARE(bytes(foreign), before);
      QVERIFY(!QFile::exists(foreign + "-wal") && !QFile::exists(foreign + "-shm"));
    }
    // An empty file is a new store.
    writeFile(dir.filePath("empty.db"), "");
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "1", "--db", dir.filePath("empty.db")}).exitCode, 0);
  }

  // Reading the store (runs list, show, export) leaves no -wal or -shm beside it: made by a reader they outlive
  // it, and another user's stop the store's owner from writing.
  void readingTheStoreLeavesNoFilesBeside() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    for (const QStringList& args : QList<QStringList>{{"list"}, {"show", "1"}, {"export", "1"}}) {
      Run r = tessera(QStringList{"runs", "--project", dir.path()} + args);
      QVERIFY2(r.exitCode == 0, qPrintable(r.err));
      QVERIFY2(!QFile::exists(dir.filePath("runs.db-wal")) && !QFile::exists(dir.filePath("runs.db-shm")),
               qPrintable(args.join(' ')));
    }
    Run write = tessera({"runs", "--project", dir.path(), "tag", "1", "kept"});
    QVERIFY2(write.exitCode == 0, qPrintable(write.err));
    QVERIFY(tessera({"runs", "--project", dir.path(), "list"}).out.contains("#kept"));
  }

  // A store its reader may not write (in a read-only folder, or another user's file): runs list, show and export
  // read it and leave the folder as they found it (they failed "not a Tessera run store (attempt to write a
  // readonly database)"); commands that write say what they may not write. A -wal a killed writer left, which
  // cannot be read without making a -shm there, is an error that names it and the way out, never an older store
  // shown as if it were all; a reader that may write the store reads it, folds it in and leaves no files.
  void storesTheReaderMayNotWrite() {
    QTemporaryDir temp;
    setMode(temp.path(), kReadOnlyFolder | QFileDevice::WriteOwner);
    // A folder name SQLite's URIs must escape.
    QVERIFY(QDir(temp.path()).mkdir("store #1? ü%20"));
    QDir dir(QDir(temp.path()).filePath("store #1? ü%20"));
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    const QString store = dir.filePath("runs.db");
    setMode(store, kReadOnly);
    auto entries = [&] { return dir.entryList(QDir::Files | QDir::Hidden, QDir::Name); };
    const QStringList files = entries();
    QVERIFY2(!files.contains("runs.db-wal") && !files.contains("runs.db-shm"), qPrintable(files.join(' ')));
    const QByteArray before = bytesOf(store);
    // A read-only folder, then a folder any user may write holding a store the reader may not write.
    for (const auto folderMode : {kReadOnlyFolder, kOpenFolder}) {
      setMode(dir.path(), folderMode);
      for (const QStringList& args : QList<QStringList>{{"list"}, {"show", "1"}, {"export", "1"}}) {
        Run r = tesseraAsReader(QStringList{"runs", "--project", dir.path()} + args);
        QVERIFY2(r.exitCode == 0 && r.out.contains("1"), qPrintable(args.join(' ') + ": " + r.err));
        QCOMPARE(entries(), files);
        QCOMPARE(bytesOf(store), before);
      }
      QVERIFY(tesseraAsReader({"runs", "--project", dir.path(), "list"}).out.contains("tiny_mlp"));
    }
    setMode(dir.path(), kReadOnlyFolder);
    Run tag = tesseraAsReader({"runs", "--project", dir.path(), "tag", "1", "kept"});
    QCOMPARE(tag.exitCode, 1);
    QVERIFY2(tag.err.contains("run store " + store + ": this user may not write it"), qPrintable(tag.err));
    QCOMPARE(entries(), files);
    // Training it with a store elsewhere: the checkpoints' folder is said before a run is made (it was a failed
    // run, "cannot create the checkpoint folder").
    setMode(temp.path(), kOpenFolder);
    setMode(dir.filePath("checkpoints"), kReadOnlyFolder);
    const QString elsewhere = QDir(temp.path()).filePath("elsewhere.db");
    Run train = tesseraAsReader({"train", dir.path(), "--quiet", "--steps", "1", "--db", elsewhere});
    QCOMPARE(train.exitCode, 1);
    QVERIFY2(train.err.startsWith("tessera train: " + dir.filePath("project.toml") + ": this user may not write " +
                                  dir.filePath("checkpoints") + ", where a run keeps its checkpoints"),
             qPrintable(train.err));
    QVERIFY(!QFile::exists(elsewhere));
    setMode(dir.filePath("checkpoints"), kOpenFolder);
    setMode(temp.path(), kReadOnlyFolder | QFileDevice::WriteOwner);

    // A killed writer's -wal: a rename that never reached the file.
    setMode(dir.path(), kReadOnlyFolder | QFileDevice::WriteOwner);
    setMode(store, kReadOnly | QFileDevice::WriteOwner);
    {
      sqlite3* db = nullptr;
      QCOMPARE(sqlite3_open(store.toUtf8().constData(), &db), SQLITE_OK);
      QCOMPARE(sqlite3_exec(db, "PRAGMA wal_autocheckpoint = 0; UPDATE runs SET name = 'renamed'", nullptr, nullptr,
                            nullptr),
               SQLITE_OK);
      QVERIFY(QFile::copy(store, dir.filePath("db.copy")) && QFile::copy(store + "-wal", dir.filePath("wal.copy")));
      sqlite3_close(db);  // folds the WAL in and removes it: put back as the killed writer left them
      QVERIFY(QFile::remove(store) && QFile::rename(dir.filePath("db.copy"), store));
      QVERIFY(QFile::rename(dir.filePath("wal.copy"), store + "-wal"));
      QVERIFY(!QFile::exists(store + "-shm"));
    }
    setMode(store, kReadOnly);
    setMode(store + "-wal", kReadOnly);
    setMode(dir.path(), kReadOnlyFolder);
    const QStringList killed = entries();
    Run pending = tesseraAsReader({"runs", "--project", dir.path(), "list"});
    QCOMPARE(pending.exitCode, 1);
    QVERIFY2(pending.err.contains("run store " + store + ": " + store + "-wal holds") &&
                 pending.err.contains("writes not yet folded into the store") &&
                 pending.err.contains("its folder " + dir.path() + " is read-only"),
             qPrintable(pending.err));
    QCOMPARE(entries(), killed);
    // Its owner reads the rename and leaves the folder clean, as the next writer would.
    setMode(dir.path(), kOpenFolder);
    setMode(store, kReadOnly | QFileDevice::WriteOwner);
    setMode(store + "-wal", kReadOnly | QFileDevice::WriteOwner);
    Run owner = tessera({"runs", "--project", dir.path(), "list"});
    QVERIFY2(owner.exitCode == 0 && owner.out.contains("renamed"), qPrintable(owner.out + owner.err));
    QCOMPARE(entries(), files);
  }

  // A project copied with its store: deleting a run of the copy removes the copy's checkpoints, never the
  // original's (it removed the folder under the project the run recorded, the original's, and kept the copy's);
  // a copy of the store alone names the original's folder and leaves it as it is.
  void deletingARunOfACopiedProjectKeepsTheOriginals() {
    QTemporaryDir dir;
    const QString original = dir.filePath("original"), copy = dir.filePath("copy");
    QVERIFY(QDir().mkpath(original));
    writeFile(original + "/project.toml", kTinyMlp);
    QCOMPARE(tessera({"train", original, "--quiet", "--steps", "2"}).exitCode, 0);
    QCOMPARE(QProcess::execute("cp", {"-r", original, copy}), 0);
    const QString kept = original + "/checkpoints/run-1/latest.safetensors";
    Run deleted = tessera({"runs", "--project", copy, "delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0 && deleted.out.contains(copy + "/checkpoints/run-1"),
             qPrintable(deleted.out + deleted.err));
    QVERIFY(QFile::exists(kept));
    QVERIFY(!QDir(copy + "/checkpoints/run-1").exists());
    QVERIFY(QFile::copy(original + "/runs.db", dir.filePath("alone.db")));
    Run alone = tessera({"runs", "--db", dir.filePath("alone.db"), "delete", "1", "--yes"});
    QVERIFY2(alone.exitCode == 0 &&
                 alone.out.contains(original + "/checkpoints/run-1 belongs to run 1 of " + original + "/runs.db"),
             qPrintable(alone.out + alone.err));
    QVERIFY(QFile::exists(kept));
    QVERIFY(tessera({"eval", original}).exitCode == 0);
  }

  // A run whose process was killed (SIGKILL: nothing of it ran after) is listed as crashed, not running forever,
  // and can be deleted; a run still training is listed as running.
  void aKilledRunIsListedAsCrashed() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess p;
    auto list = [&] { return runsList(dir.path()); };
    QVERIFY2(startTrainer(p, dir.path()), qPrintable(list()));
    const qint64 pid = p.processId();
    p.kill();
    QVERIFY(p.waitForFinished());
    QVERIFY2(list().contains("crashed"), qPrintable(list()));
    Run show = tessera({"runs", "--project", dir.path(), "show", "1"});
    QVERIFY2(show.out.startsWith("run 1: tiny_mlp (crashed)") &&
                 show.out.contains(QString("its process (pid %1 on ").arg(pid)),
             qPrintable(show.out));
    Run deleted = tessera({"runs", "--project", dir.path(), "delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
  }

  // config/resolved.toml, the configuration a run records, has the steps it was asked for (--steps).
  void resolvedConfigHasTheRunsSteps() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open_v2(dir.filePath("runs.db").toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    QCOMPARE(sqlite3_prepare_v2(db, "SELECT data FROM artifacts WHERE run = 1 AND name = 'config/resolved.toml'", -1,
                                &st, nullptr),
             SQLITE_OK);
    QCOMPARE(sqlite3_step(st), SQLITE_ROW);
    const QString resolved = QString::fromUtf8(static_cast<const char*>(sqlite3_column_blob(st, 0)), sqlite3_column_bytes(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    QVERIFY2(resolved.contains("\nsteps = 2  # --steps (project.toml: 6)\n"), qPrintable(resolved));
    // It continues as it was asked for.
    Run resumed = tessera({"train", dir.path(), "--resume", "1", "--steps", "3"});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("step     3/3"), qPrintable(resumed.out + resumed.err));
  }

  // A store another process holds locked is waited for, and the wait is said once (not taken for a hang).
  void waitingForALockedStoreIsSaid() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "1"}).exitCode, 0);
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(dir.filePath("runs.db").toUtf8().constData(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
    QProcess p;
    p.start(TESSERA_BIN, {"train", dir.path(), "--quiet", "--steps", "1"});
    QVERIFY(p.waitForStarted());
    QElapsedTimer waited;
    waited.start();
    QByteArray err;
    while (!err.contains("waiting for") && waited.elapsed() < 4000) {
      p.waitForReadyRead(100);
      err += p.readAllStandardError();
    }
    QCOMPARE(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    QVERIFY(p.waitForFinished(120000));
    err += p.readAllStandardError();
    QVERIFY2(p.exitCode() == 0, err.constData());
    QCOMPARE(err.count("waiting for " + dir.filePath("runs.db").toUtf8() + " (locked by another process)..."), 1);
  }

  // The wait has a limit of the user's: --lock-wait SECONDS on the command, else TESSERA_STORE_LOCK_WAIT. An edit
  // of a store another process holds locked fails after about that long (not 30 s), saying so, and changes
  // nothing; once the lock is free the same edit goes through.
  void theLockWaitIsTheUsersToSet() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "1"}).exitCode, 0);
    const QString db = dir.filePath("runs.db");
    sqlite3* holder = nullptr;
    QCOMPARE(sqlite3_open(db.toUtf8().constData(), &holder), SQLITE_OK);
    QCOMPARE(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("TESSERA_STORE_LOCK_WAIT");
    QProcessEnvironment withVariable = env;
    withVariable.insert("TESSERA_STORE_LOCK_WAIT", "1");
    const QList<QPair<QStringList, QProcessEnvironment>> edits = {
        {{"runs", "--db", db, "--lock-wait", "1", "rename", "1", "renamed"}, env},
        {{"runs", "--db", db, "tag", "1", "tagged"}, withVariable},
    };
    for (const auto& [args, environment] : edits) {
      QElapsedTimer waited;
      waited.start();
      const Run r = tessera(args, environment);
      QVERIFY2(r.exitCode == 1, qPrintable(args.join(' ') + ": " + r.err));
      QVERIFY2(r.err.contains("is locked by another process"), qPrintable(r.err));
      QVERIFY2(waited.elapsed() < 20000, qPrintable(QString::number(waited.elapsed())));
    }
    const Run bad = tessera({"runs", "--db", db, "--lock-wait", "0", "list"}, env);
    QVERIFY2(bad.exitCode != 0 && bad.err.contains("--lock-wait: 0 is not a number of seconds above 0"),
             qPrintable(bad.err));
    QCOMPARE(sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(holder);
    const Run listed = tessera({"runs", "--db", db, "list"}, env);
    QVERIFY2(!listed.out.contains("renamed") && !listed.out.contains("tagged"), qPrintable(listed.out));
    QCOMPARE(tessera({"runs", "--db", db, "--lock-wait", "1", "tag", "1", "tagged"}, env).exitCode, 0);
    QVERIFY(tessera({"runs", "--db", db, "list"}, env).out.contains("tagged"));
  }

  // A sweep's --lock-wait is each run's: its runs wait as long as it says for a store another process holds locked,
  // not TESSERA_STORE_LOCK_WAIT's time. The lock is taken once the sweep has opened the store and starts its run
  // ("[1/1]"), so that only the run meets it; TESSERA_STORE_LOCK_WAIT, which the run inherits, says the opposite.
  void aSweepsLockWaitIsItsRuns() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    const QString db = dir.filePath("runs.db");
    const QByteArray notice = "waiting for " + db.toUtf8() + " (locked by another process)...";
    struct Case {
      QString lockWait, variable;
      bool finishes;
    };
    for (const Case& c : {Case{"30", "1", true}, Case{"1", "60", false}}) {
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert("TESSERA_STORE_LOCK_WAIT", c.variable);
      QProcess sweep;
      sweep.setProcessEnvironment(env);
      sweep.start(TESSERA_BIN, {"sweep", dir.path(), "--grid", "train.lr=1e-2", "--steps", "2", "--name",
                                "wait" + c.lockWait, "--lock-wait", c.lockWait});
      QByteArray out, err;
      QElapsedTimer waited;
      waited.start();
      while (!out.contains("[1/1]") && sweep.state() != QProcess::NotRunning && waited.elapsed() < 60000) {
        sweep.waitForReadyRead(50);
        out += sweep.readAllStandardOutput();
      }
      QVERIFY2(out.contains("[1/1]"), out.constData());
      sqlite3* holder = nullptr;
      QCOMPARE(sqlite3_open(db.toUtf8().constData(), &holder), SQLITE_OK);
      QCOMPARE(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
      // Held until the run fails, or for 4 s after it says it waits (after a second): past the 1 s wait.
      waited.restart();
      while (!err.contains(notice) && !err.contains("is locked by another process") &&
             sweep.state() != QProcess::NotRunning && waited.elapsed() < 60000) {
        sweep.waitForReadyRead(50);
        err += sweep.readAllStandardError();
      }
      if (err.contains(notice)) QTest::qWait(4000);
      QCOMPARE(sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
      sqlite3_close(holder);
      const Run r = finished(sweep);
      err += r.err.toUtf8();
      out += r.out.toUtf8();
      if (c.finishes) {
        QVERIFY2(err.contains(notice), err.constData());
        QVERIFY2(r.exitCode == 0 && out.contains("train.lr=1e-2 finished"), (out + err).constData());
      } else {
        QVERIFY2(r.exitCode == 1 && out.contains("train.lr=1e-2 FAILED"), (out + err).constData());
        QVERIFY2(err.contains("is locked by another process"), err.constData());
      }
    }
  }

  // A closed stdout stops a sweep as it stops train: its run is checkpointed and stopped, no other starts.
  void closedStdoutStopsASweep() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess sh;
    sh.start("/bin/bash", {"-c", QString("'%1' sweep '%2' --grid train.lr=1e-3,2e-3,3e-3 --steps 100000 | head -2; "
                                         "exit ${PIPESTATUS[0]}").arg(TESSERA_BIN, dir.path())});
    QVERIFY(sh.waitForFinished(120000));
    const QString err = QString::fromUtf8(sh.readAllStandardError());
    QVERIFY2(sh.exitCode() == 130, qPrintable(QString::number(sh.exitCode()) + err));
    QVERIFY2(err.contains("tessera sweep: stdout was closed"), qPrintable(err));
    Run list = tessera({"runs", "--project", dir.path(), "list"});
    QVERIFY2(list.out.contains("1 runs in") && list.out.contains("stopped"), qPrintable(list.out));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    Run steps = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3", "--steps", "-2"});
    QVERIFY(steps.exitCode != 0);
    QVERIFY2(steps.err.startsWith("--steps: -2 is not a positive number"), qPrintable(steps.err));
    Run none = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3", "--steps", "0"});
    QVERIFY2(none.exitCode != 0 && none.err.startsWith("--steps: 0 is not a positive number"), qPrintable(none.err));
  }

  // An interrupt sent to a sweep alone (kill PID, the IDE's Stop) is passed on to its running run, which stops
  // with a checkpoint; no more runs start, the run is said stopped (not FAILED) and the sweep exits 130. The
  // sweep used to die by the signal and leave its run training.
  void interruptingASweepStopsItsRunWithACheckpoint() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess p;
    p.start(TESSERA_BIN, {"sweep", dir.path(), "--grid", "train.lr=1e-3,2e-3", "--steps", "10000000"});
    QVERIFY(p.waitForStarted());
    auto list = [&] { return tessera({"runs", "--project", dir.path(), "list"}).out; };
    QVERIFY2(untilListedRunning(list), qPrintable(list()));
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(60000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput()), err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 130, qPrintable(err));
    QVERIFY2(err.contains("tessera sweep: interrupted: its running runs stop with a checkpoint"), qPrintable(err));
    QVERIFY2(out.contains("[1/2] train.lr=1e-3 stopped") && !out.contains("[2/2]") && out.contains("; 1 stopped"),
             qPrintable(out));
    QVERIFY2(list().contains("1 runs in") && list().contains("stopped"), qPrintable(list()));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
  }

  // --resume of a run that another process is training is refused, naming that process (both went on, writing
  // the run's metrics and its checkpoint); once it stopped, the run resumes.
  void aRunIsTrainedByOneProcessAtATime() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    QProcess first;
    QVERIFY2(startTrainer(first, dir.path(), {"--resume", "1"}), qPrintable(runsList(dir.path())));
    const QString refused = QString("tessera train: run 1 of %1 is being trained by another process (pid %2): stop it "
                                    "first")
                                .arg(dir.filePath("runs.db"))
                                .arg(first.processId());
    for (const QStringList& resume : QList<QStringList>{{"--resume", "1"}, {"--resume"}}) {
      Run second = tessera(QStringList{"train", dir.path(), "--quiet", "--steps", "10000000"} + resume);
      QCOMPARE(second.exitCode, 1);
      QVERIFY2(second.err.startsWith(refused), qPrintable(second.err));
    }
    ::kill(static_cast<pid_t>(first.processId()), SIGINT);
    QVERIFY(first.waitForFinished(60000));
    QCOMPARE(first.exitCode(), 130);
    Run after = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--steps", "1"});
    QVERIFY2(after.exitCode == 1 && after.err.contains("is at step") && !after.err.contains("another process"),
             qPrintable(after.err));
  }

  // The refusal does not depend on the pid or the machine the run recorded: a run whose process says it runs on
  // another machine (a store shared over NFS) is refused as long as its trainer holds the run's lease (it was
  // resumed a second time: the pid check gave up on another host's process), and a trainer killed by SIGKILL
  // leaves no lease behind.
  void aRunIsTrainedByOneProcessOnAnyMachine() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    QProcess first;
    QVERIFY2(startTrainer(first, dir.path(), {"--resume", "1"}), qPrintable(runsList(dir.path())));
    QVERIFY(recordProcessElsewhere(dir.filePath("runs.db")));
    Run second = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--steps", "3"});
    QVERIFY2(second.exitCode == 1 &&
                 second.err.startsWith(QString("tessera train: run 1 of %1 is being trained by another process (pid "
                                               "4242 on other-machine): stop it first (Ctrl-C where it runs, or kill "
                                               "-INT 4242 on other-machine), then resume")
                                           .arg(dir.filePath("runs.db"))),
             qPrintable(second.err));
    ::kill(static_cast<pid_t>(first.processId()), SIGKILL);
    QVERIFY(first.waitForFinished(60000));
    Run after = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--steps", "1"});
    QVERIFY2(after.exitCode == 1 && after.err.contains("is at step") && !after.err.contains("another process"),
             qPrintable(after.err));
  }

  // runs delete and the crashed status ask the run's lease, not its status or its pid: a run a process trains is
  // refused, naming that process, also when its record says another machine (a store shared over NFS); once the
  // trainer is killed (SIGKILL: the store still says running) its free lease lists it crashed wherever the record
  // says it ran (the pid check left another machine's run running for ever), and it is deleted.
  void aRunIsDeletedAndListedCrashedByItsLease() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess trainer;
    QVERIFY2(startTrainer(trainer, dir.path()), qPrintable(runsList(dir.path())));
    const QStringList remove{"runs", "--project", dir.path(), "delete", "1", "--yes"};
    Run refused = tessera(remove);
    QVERIFY2(refused.exitCode == 1 &&
                 refused.err.contains(QString(" is being trained by another process (pid %1): stop it first (Ctrl-C "
                                              "where it runs, or kill -INT %1), then delete it\n")
                                          .arg(trainer.processId())) &&
                 refused.err.contains("run 1 of "),
             qPrintable(refused.err));
    QVERIFY(recordProcessElsewhere(dir.filePath("runs.db")));
    QVERIFY2(runsList(dir.path()).contains("running"), qPrintable(runsList(dir.path())));
    Run elsewhere = tessera(remove);
    QVERIFY2(elsewhere.exitCode == 1 && elsewhere.err.contains("is being trained by another process (pid 4242 on "
                                                               "other-machine): stop it first (Ctrl-C where it runs, "
                                                               "or kill -INT 4242 on other-machine), then delete it\n"),
             qPrintable(elsewhere.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1")));
    ::kill(static_cast<pid_t>(trainer.processId()), SIGKILL);
    QVERIFY(trainer.waitForFinished(60000));
    QVERIFY2(runsList(dir.path()).contains("crashed"), qPrintable(runsList(dir.path())));
    Run show = tessera({"runs", "--project", dir.path(), "show", "1"});
    QVERIFY2(show.out.startsWith("run 1: tiny_mlp (crashed)") &&
                 show.out.contains("its process (pid 4242 on other-machine) ended without closing the run"),
             qPrintable(show.out));
    Run deleted = tessera(remove);
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
    QVERIFY2(!runsList(dir.path()).contains("tiny_mlp"), qPrintable(runsList(dir.path())));
    QVERIFY(!QFile::exists(dir.filePath("checkpoints/run-1")));
  }

  // eval and generate of a run whose latest.safetensors is damaged name the run's intact checkpoints and the
  // command that reads the newest, as train --resume does (they said the read error alone); the file is left as
  // it is, and that command reads the intact one.
  void evalAndGenerateOfADamagedCheckpointOfferTheIntactOnes() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), QByteArray(kTinyGpt2) + "checkpoint_every = 2\nkeep_checkpoints = 2\n");
    QByteArray corpus;
    for (int i = 0; i < 60; ++i)
      corpus += "Permission is hereby granted, free of charge, to any person obtaining a copy of this software.\n";
    writeFile(dir.filePath("corpus.txt"), corpus);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--sample", "0"}).exitCode, 0);
    // latest and step-000004 may be one file (a hard link): both are damaged; step-000002 is intact.
    const QString folder = dir.filePath("checkpoints/run-1"), latest = folder + "/latest.safetensors";
    QVERIFY(QFile::resize(latest, 100));
    QVERIFY(QFile::resize(folder + "/step-000004.safetensors", 100));
    const QByteArray damaged = bytesOf(latest);
    for (const auto& [command, verb] : QList<QPair<QString, QString>>{{"eval", "evaluate"}, {"generate", "sample from"}}) {
      const QStringList again{command, dir.path(), "--set", "train.eval_steps=1"};
      Run refused = tessera(again);
      QCOMPARE(refused.exitCode, 1);
      QVERIFY2(refused.err.startsWith(QString("tessera %1: cannot %2 run 1: its checkpoint %3 is damaged (")
                                          .arg(command, verb, latest)) &&
                   refused.err.endsWith(QString("); the file is left as it is. Its intact checkpoints: "
                                                "step-000002.safetensors (step 2). To %1 the newest: tessera %2 %3 --set "
                                                "train.eval_steps=1 --run 1 --from 2\n")
                                            .arg(verb, command, dir.path())),
               qPrintable(refused.err));
      Run used = tessera(again + QStringList{"--run", "1", "--from", "2"});
      QVERIFY2(used.exitCode == 0, qPrintable(used.err));
    }
    QCOMPARE(bytesOf(latest), damaged);
    Run step = tessera({"eval", dir.path(), "--from", "2"});
    QVERIFY2(step.exitCode == 0 && step.out.contains(folder + "/step-000002.safetensors"), qPrintable(step.out + step.err));
    QVERIFY2(tessera({"eval", dir.path(), "--best", "--from", "2"}).exitCode != 0, "--from excludes --best");
  }

  // A damaged latest.safetensors (truncated, or garbage) stops --resume with the run's intact checkpoints and the
  // command that continues from the newest (it said "cannot resume from ...: header length ..." alone); the file
  // is left as it is. --resume --from best continues the run exactly as an uninterrupted run, keeping the damaged
  // file under another name when it writes its next checkpoint.
  void aDamagedLatestCheckpointOffersTheIntactOnes() {
    QTemporaryDir dir, reference;
    const QByteArray toml = QByteArray(kTinyMlp) + "checkpoint_every = 2\nkeep_checkpoints = 2\n";
    writeFile(dir.filePath("project.toml"), toml);
    writeFile(reference.filePath("project.toml"), toml);
    QCOMPARE(tessera({"train", reference.path(), "--quiet"}).exitCode, 0);
    Run stopped = tessera({"train", dir.path(), "--quiet", "--stop-at", "4"});
    QVERIFY2(stopped.exitCode == 0, qPrintable(stopped.err));
    // latest and step-000004 are one file (a hard link): truncating it damages both; best is step 3's evaluation.
    const QString folder = dir.filePath("checkpoints/run-1"), latest = folder + "/latest.safetensors";
    const QByteArray damaged = bytesOf(latest).left(100);
    QVERIFY(QFile::resize(latest, 100));
    const QString command = "tessera train " + dir.path();
    Run refused = tessera({"train", dir.path(), "--quiet", "--resume"});
    QCOMPARE(refused.exitCode, 1);
    QVERIFY2(refused.err.startsWith("tessera train: cannot resume run 1: its checkpoint " + latest + " is damaged ("),
             qPrintable(refused.err));
    QVERIFY2(refused.err.contains(QRegularExpression(
                 "\\); the file is left as it is\\. Its intact checkpoints: best\\.safetensors \\(step 3, val_loss "
                 "[0-9]+\\.[0-9]{4}\\), step-000002\\.safetensors \\(step 2\\)\\. To continue from the newest \\(the steps "
                 "after it are trained again\\): ")) &&
                 refused.err.endsWith(command + " --resume 1 --from best\n"),
             qPrintable(refused.err));
    QCOMPARE(bytesOf(latest), damaged);
    QVERIFY(tessera({"runs", "--project", dir.path(), "list"}).out.contains("stopped"));
    // A step that was not kept is named with those that were.
    Run noStep = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--from", "3"});
    QVERIFY2(noStep.exitCode == 1 && noStep.err.contains("run 1 has no step-000003.safetensors (" + folder +
                                                         "): it keeps step-000002.safetensors, step-000004.safetensors"),
             qPrintable(noStep.err));
    QVERIFY2(tessera({"train", dir.path(), "--from", "best"}).exitCode != 0, "--from needs --resume");

    Run resumed = tessera({"train", dir.path(), "--resume", "1", "--from", "best"});
    QVERIFY2(resumed.exitCode == 0, qPrintable(resumed.err));
    QVERIFY2(resumed.out.contains("resumed run 1 at step 3 from " + folder + "/best.safetensors\n") &&
                 resumed.out.contains(latest + " is damaged (") &&
                 resumed.out.contains("): it is kept as latest.damaged.safetensors when this run writes its next "
                                      "checkpoint\n") &&
                 resumed.out.contains("kept the damaged " + latest + " as " + folder + "/latest.damaged.safetensors\n"),
             qPrintable(resumed.out));
    QCOMPARE(bytesOf(folder + "/latest.damaged.safetensors"), damaged);
    // The same losses as a run that was never stopped, step by step, and its final checkpoint byte for byte.
    const auto losses = lossesOf(dir.filePath("runs.db"), 1);
    QCOMPARE(losses.size(), 6);
    QCOMPARE(losses, lossesOf(reference.filePath("runs.db"), 1));
    QCOMPARE(bytesOf(latest), bytesOf(reference.filePath("checkpoints/run-1/latest.safetensors")));

    // Garbage everywhere: no intact checkpoint is left, and a new run is the way on.
    QDir checkpoints(folder);
    for (const QString& f : checkpoints.entryList({"*.safetensors"}, QDir::Files)) writeFile(folder + "/" + f, "garbage");
    Run none = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--steps", "8"});
    QVERIFY2(none.exitCode == 1 &&
                 none.err.startsWith("tessera train: cannot resume run 1: its checkpoint " + latest +
                                     " is damaged (too short for safetensors), and it has no other intact checkpoint; "
                                     "the file is left as it is. A new run trains from the start: " + command + "\n"),
             qPrintable(none.err));
    QCOMPARE(bytesOf(latest), QByteArray("garbage"));
  }

  // A closed stdout (tessera train | head) stops the run as Ctrl-C does: checkpointed, stopped, resumable.
  void closedStdoutStopsTrainingWithACheckpoint() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess sh;
    sh.start("/bin/bash", {"-c", QString("'%1' train '%2' --steps 100000 | head -3; exit ${PIPESTATUS[0]}")
                                     .arg(TESSERA_BIN, dir.path())});
    QVERIFY(sh.waitForFinished(120000));
    QCOMPARE(sh.exitCode(), 130);
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    Run show = tessera({"runs", "--project", dir.path(), "show", "1"});
    QVERIFY2(show.out.startsWith("run 1: tiny_mlp (stopped)"), qPrintable(show.out));
  }

  // What can be checked before a run is created is, and an error after leaves the run failed, never running.
  void failuresLeaveNoRunRunning() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    Run tag = tessera({"train", dir.path(), "--quiet", "--tag", ""});
    QCOMPARE(tag.exitCode, 1);
    QVERIFY2(tag.err.contains("a tag cannot be empty"), qPrintable(tag.err));
    writeFile(dir.filePath("checkpoints"), "a file");
    Run file = tessera({"train", dir.path(), "--quiet"});
    QCOMPARE(file.exitCode, 1);
    QVERIFY2(file.err.contains("checkpoints is not a folder"), qPrintable(file.err));
    Run trace = tessera({"profile", dir.path(), "--steps", "1", "--warmup", "0", "--quiet", "--trace", "/nonexistdir/x.json"});
    QCOMPARE(trace.exitCode, 1);
    QVERIFY2(trace.err.contains("/nonexistdir is not a folder"), qPrintable(trace.err));
    Run list = tessera({"runs", "--project", dir.path(), "list"});
    QVERIFY2(!list.out.contains("running"), qPrintable(list.out + list.err));
  }

  void evalAndGenerateFromACheckpoint() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyGpt2);
    QByteArray corpus;
    for (int i = 0; i < 60; ++i)
      corpus += "Permission is hereby granted, free of charge, to any person obtaining a copy of this software.\n";
    writeFile(dir.filePath("corpus.txt"), corpus);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--sample", "0"}).exitCode, 0);
    QString ckpt = dir.filePath("checkpoints/run-1/latest.safetensors");
    QVERIFY(QFile::exists(ckpt));

    Run e = tessera({"eval", dir.path(), "--checkpoint", ckpt});
    QCOMPARE(e.exitCode, 0);
    QVERIFY2(e.out.contains(QRegularExpression("validation loss [0-9]+\\.[0-9]{4} over 2 batches")), qPrintable(e.out + e.err));

    Run g = tessera({"generate", dir.path(), "--checkpoint", ckpt, "--prompt", "Permission", "--tokens", "8",
                     "--seed", "3"});
    QCOMPARE(g.exitCode, 0);
    QVERIFY2(g.out.startsWith("Permission"), qPrintable(g.out + g.err));
    Run again = tessera({"generate", dir.path(), "--checkpoint", ckpt, "--prompt", "Permission", "--tokens", "8",
                         "--seed", "3"});
    QCOMPARE(again.out, g.out);  // a seed reproduces a sample

    Run missing = tessera({"eval", dir.path(), "--checkpoint", dir.filePath("absent.safetensors")});
    QCOMPARE(missing.exitCode, 1);
    QVERIFY2(missing.err.contains("does not exist"), qPrintable(missing.err));
    Run missingGen = tessera({"generate", dir.path(), "--checkpoint", dir.filePath("absent.safetensors")});
    QCOMPARE(missingGen.exitCode, 1);
    QVERIFY2(missingGen.err.contains("does not exist"), qPrintable(missingGen.err));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestCliRuns)
#include "test_cli_runs.moc"
