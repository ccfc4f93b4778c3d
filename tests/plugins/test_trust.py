"""test_trust.py: which plugin files `ember` agrees to load (a plugin's code
runs as whoever loads it). Uses the marker plugin (marker-plugin.c), whose
constructor appends to $EMBER_TEST_MARKER the moment the module is mapped:
a refused plugin must leave no marker, since its code ran before any
check of its table could have refused it.

- A plugin folder or file writable by group or others, or owned by another
  user, is refused (the reason names the path, the owner or mode found and
  what to do); the marker stays absent. Owned by the user (or root) and
  not writable by others, it loads. The folder named is checked as well
  as the one the file is in (a link to a trusted file, in a folder others
  may write, is refused).

- Run tags: `ember run tag RUN plugin.x=...` is refused (the trainer writes
  those tags), and the SHA-256 the trainer records is of the bytes loaded,
  even when the file's path names another file by then. A tag written into the registry by other means (anyone who
  can write a shared registry can), naming a plugin file with a wrong or
  no SHA-256, refuses `ember train --resume` (exit 1, what to do, nothing
  recorded changed) and `ember export NAME@1`, and the file's constructor
  never runs; with the right SHA-256 it loads and the run resumes, unless
  the file's folder is writable by others.

- Read-only commands (runs, run show, compare, metrics, models, devices,
  gc --dry-run, info of a spec of built-in layers, ...) load no plugin:
  with the marker plugin in $EMBER_HOME/plugins, no marker. `ember info` of
  a spec naming SEBlock (a plugin's layer) loads them, and so does
  `ember plugins`.

  test_trust.py EMBER SOURCE_ROOT   (env: EMBER_MARKER_PLUGIN, EMBER_PLUGIN_DIR)
"""
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest

EMBER, SOURCE = sys.argv[1], sys.argv[2]
MARKER_SO = os.environ["EMBER_MARKER_PLUGIN"]
GOOD = os.environ["EMBER_PLUGIN_DIR"]
ROOT = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ember-trust-")
        os.chmod(self.tmp, 0o755)
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        self.marker = os.path.join(self.tmp, "marker")
        self.env = dict(os.environ, EMBER_HOME=self.home, EMBER_TEST_MARKER=self.marker)
        for k in ("XDG_DATA_HOME", "EMBER_PLUGIN_PATH"):
            self.env.pop(k, None)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ember(self, *args, env=None, as_nobody=False):
        cmd = [EMBER] + [str(a) for a in args]
        if as_nobody:
            cmd = [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, env=env or self.env, timeout=300)
        self.assertLess(p.returncode, 128, p.stderr)
        self.assertNotIn("Sanitizer", p.stderr)
        return p

    def ok(self, *args, **kw):
        p = self.ember(*args, **kw)
        self.assertEqual(p.returncode, 0, "ember %s: %s" % (args, p.stderr))
        return p

    def plugin_dir(self, name, mode=0o755, file_mode=0o644):
        """A folder holding the marker plugin as marker.so."""
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        so = os.path.join(d, "marker.so")
        shutil.copy(MARKER_SO, so)
        os.chmod(so, file_mode)
        os.chmod(d, mode)
        return d, so

    def ran(self):
        return os.path.exists(self.marker)

    def listing(self, d, **kw):
        j = json.loads(self.ok("--plugin-dir", d, "plugins", "--json", **kw).stdout)
        return [e["name"] for e in j["plugins"]], {e["path"]: e["reason"] for e in j["refused"]}


class FolderAndFile(Base):
    def test_trusted_folder_loads(self):
        d, so = self.plugin_dir("mine")
        names, refused = self.listing(d)
        self.assertEqual(names, ["marker"], refused)
        self.assertTrue(self.ran())  # the marker works: its absence below means something

    def test_world_writable_folder_is_refused(self):
        for mode in (0o777, 0o1777, 0o775):  # others, sticky like /tmp, the group
            with self.subTest(mode=oct(mode)):
                d, so = self.plugin_dir("ww-%o" % mode, mode=mode)
                p = self.ember("--plugin-dir", d, "plugins", "--json")
                self.assertEqual(p.returncode, 0, p.stderr)
                j = json.loads(p.stdout)
                self.assertEqual(j["plugins"], [])
                why = j["refused"][0]["reason"]
                self.assertIn("its folder %s is writable by" % d, why)
                self.assertIn("mode %04o" % mode, why)
                self.assertIn("chmod go-w %s" % d, why)
                self.assertIn("marker.so refused", p.stderr)
                self.assertFalse(self.ran(), "the plugin's constructor ran")

    def test_world_writable_file_is_refused(self):
        for mode in (0o666, 0o664):
            with self.subTest(mode=oct(mode)):
                d, so = self.plugin_dir("wf-%o" % mode, file_mode=mode)
                names, refused = self.listing(d)
                self.assertEqual(names, [])
                self.assertIn("the file %s is writable by" % so, refused[so])
                self.assertIn("mode %04o" % mode, refused[so])
                self.assertIn("chmod go-w %s" % so, refused[so])
                self.assertFalse(self.ran(), "the plugin's constructor ran")

    def test_file_owned_by_another_user_is_refused(self):
        if not ROOT:
            self.skipTest("needs root to give a file to another user")
        d, so = self.plugin_dir("theirs")
        os.chown(so, 65534, 65534)
        names, refused = self.listing(d)
        self.assertEqual(names, [])
        self.assertIn("the file %s is owned by uid 65534, not by you (uid 0) nor root" % so,
                      refused[so])
        self.assertIn("chown 0 %s" % so, refused[so])
        self.assertFalse(self.ran(), "the plugin's constructor ran")

    def test_folder_owned_by_another_user_is_refused(self):
        if not ROOT:
            self.skipTest("needs root to give a folder to another user")
        d, so = self.plugin_dir("their-folder")
        os.chown(d, 65534, 65534)
        names, refused = self.listing(d)
        self.assertEqual(names, [])
        self.assertIn("its folder %s is owned by uid 65534" % d, refused[so])
        self.assertFalse(self.ran(), "the plugin's constructor ran")

    def test_another_user_loads_roots_plugin_not_mine(self):
        """Root's files are trusted by everyone; a user's file is not trusted
        by another user (here: root's folder, run as nobody)."""
        if not ROOT or not SETPRIV:
            self.skipTest("needs root and setpriv to run as another user")
        d, so = self.plugin_dir("roots")
        os.chmod(self.tmp, 0o755)
        env = dict(self.env, HOME="/tmp", EMBER_TEST_MARKER="")
        names, refused = self.listing(d, env=env, as_nobody=True)
        self.assertEqual(names, ["marker"], refused)
        os.chown(so, 0, 0)
        os.chown(d, 1, 1)  # daemon's folder: not nobody's, not root's
        names, refused = self.listing(d, env=env, as_nobody=True)
        self.assertEqual(names, [])
        self.assertIn("owned by uid 1, not by you (uid 65534)", refused[so])

    def test_symlinked_file_is_loaded_from_its_target(self):
        """A link in a trusted folder to a file in a world-writable one: the
        target's folder is what is checked."""
        d, so = self.plugin_dir("ww-target", mode=0o777)
        mine = os.path.join(self.tmp, "linked")
        os.makedirs(mine)
        os.symlink(so, os.path.join(mine, "marker.so"))
        names, refused = self.listing(mine)
        self.assertEqual(names, [])
        self.assertIn("its folder %s is writable by" % d, refused[so])
        self.assertFalse(self.ran())

    def test_link_in_a_world_writable_folder_is_refused(self):
        """The folder named is checked too, not only the one the file is in:
        anyone who may write it could put a link there to any file of mine."""
        d, so = self.plugin_dir("link-target")  # trusted: the file alone would load
        ww = os.path.join(self.tmp, "ww-links")
        os.makedirs(ww)
        os.chmod(ww, 0o777)
        link = os.path.join(ww, "marker.so")
        os.symlink(so, link)
        names, refused = self.listing(ww)
        self.assertEqual(names, [])
        self.assertIn("its folder %s is writable by group and others (mode 0777)" % ww,
                      refused[link])
        self.assertFalse(self.ran(), "the plugin's constructor ran")
        # each folder named is checked on its own: a trusted one beside it still loads
        env = dict(self.env, EMBER_PLUGIN_PATH="%s:%s" % (ww, d))
        j = json.loads(self.ok("plugins", "--json", env=env).stdout)
        self.assertEqual([e["name"] for e in j["plugins"]], ["marker"])
        self.assertEqual([e["path"] for e in j["refused"]], [link])



def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class RunTags(Base):
    def quick(self, *extra):
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        p = self.ok("train", spec, "--epochs", "1", "--dataset", "synthetic", "--limit", "256",
                    "--batch", "64", "--threads", "2", "--quiet", *extra)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def forge(self, run, value):
        """What anyone who can write the registry can do, without `ember`."""
        con = sqlite3.connect(os.path.join(self.home, "registry.db"))
        con.execute("INSERT INTO run_tags (run, key, value) VALUES (?, 'plugin.marker', ?)",
                    (run, value))
        con.commit()
        con.close()

    def tags(self, run):
        j = json.loads(self.ok("run", "show", str(run), "--json").stdout)
        return {a["key"]: a["text"] for a in j["annotations"] if a["kind"] == "tag"}

    def status(self, run):
        return [r["status"] for r in json.loads(self.ok("runs", "--json").stdout)
                if r["id"] == run][0]

    def test_tag_hashes_the_bytes_loaded(self):
        """The tag's SHA-256 is of the file that was checked and loaded (its
        descriptor), not of whatever its path names when the run is recorded."""
        d, so = self.plugin_dir("swapped")
        other = os.path.join(d, "other.bin")  # not "*.so": the folder does not load it
        with open(other, "wb") as f:
            f.write(b"not the plugin that was loaded")
        loaded = sha256_of(so)
        env = dict(self.env, EMBER_TEST_MARKER_SWAP="%s:%s" % (other, so))
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        p = self.ok("--plugin-dir", d, "train", spec, "--epochs", "1", "--dataset", "synthetic",
                    "--limit", "256", "--batch", "64", "--threads", "2", "--quiet", env=env)
        run = json.loads(p.stdout.strip().splitlines()[-1])["run_id"]
        self.assertTrue(self.ran())
        self.assertNotEqual(sha256_of(so), loaded)  # the path names the other file now
        self.assertEqual(self.tags(run)["plugin.marker"], "1.0 sha256:%s %s" % (loaded, so))

    def test_plugin_tags_are_not_set_by_hand(self):
        run = self.quick("--stop-after-steps", "2")["run_id"]
        d, so = self.plugin_dir("mine")
        p = self.ember("run", "tag", run, "plugin.marker=1.0 sha256:%s %s" % ("0" * 64, so))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("not set by hand", p.stderr)
        self.assertNotIn("plugin.marker", self.tags(run))
        self.ok("run", "tag", run, "plugins=fine")  # other keys still are

    def test_resume_refuses_a_tag_whose_hash_does_not_match(self):
        stopped = self.quick("--stop-after-steps", "2")
        run = stopped["run_id"]
        self.assertTrue(stopped["stopped"], stopped)
        d, so = self.plugin_dir("planted")  # a folder the checks of owner and mode accept
        for value, why in (("1.0 sha256:%s %s" % ("0" * 64, so), "its SHA-256 is"),
                           ("1.0 %s" % so, "records no SHA-256")):
            with self.subTest(value=value):
                con = sqlite3.connect(os.path.join(self.home, "registry.db"))
                con.execute("DELETE FROM run_tags WHERE key = 'plugin.marker'")
                con.commit()
                con.close()
                self.forge(run, value)
                before = self.status(run)
                p = self.ember("train", "--resume", run, "--quiet")
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn("trained with plugin marker from %s, which is not loaded" % so,
                              p.stderr)
                self.assertIn(why, p.stderr)
                self.assertIn("--plugin-dir", p.stderr)
                self.assertFalse(self.ran(), "the planted plugin's constructor ran")
                self.assertEqual(self.tags(run)["plugin.marker"], value)  # nothing lost
                self.assertEqual(self.status(run), before)
                self.assertEqual(len(json.loads(self.ok("runs", "--json").stdout)), 1)
        # the user trusts the folder: --plugin-dir loads it, with a warning
        p = self.ember("train", "--resume", run, "--quiet", "--plugin-dir", d)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(self.ran())

    def test_resume_loads_a_tag_whose_hash_matches(self):
        run = self.quick("--stop-after-steps", "2")["run_id"]
        d, so = self.plugin_dir("recorded")
        self.forge(run, "1.0 sha256:%s %s" % (sha256_of(so), so))
        os.chmod(d, 0o777)  # ... but not from a folder others may write
        p = self.ember("train", "--resume", run, "--quiet")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("its folder %s is writable by group and others (mode 0777)" % d, p.stderr)
        self.assertFalse(self.ran())
        os.chmod(d, 0o755)
        p = self.ember("train", "--resume", run, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("plugin marker loaded from %s, as run %d recorded (SHA-256 checked)"
                      % (so, run), p.stderr)
        self.assertTrue(self.ran())

    def test_registered_version_refuses_a_forged_tag(self):
        run = self.quick()["run_id"]
        self.ok("model", "register", run, "--name", "m")
        d, so = self.plugin_dir("planted")
        self.forge(run, "1.0 sha256:%s %s" % ("0" * 64, so))
        p = self.ember("export", "m@1", "-o", os.path.join(self.tmp, "m.onnx"))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("which is not loaded: plugin %s refused: its SHA-256 is" % so, p.stderr)
        self.assertFalse(self.ran(), "the planted plugin's constructor ran")



class ReadOnlyCommands(Base):
    def test_read_only_commands_load_no_plugin(self):
        spec = os.path.join(SOURCE, "data", "models", "fmnist-mlp.json")
        args = ["--epochs", "1", "--dataset", "synthetic", "--limit", "256", "--batch", "64",
                "--threads", "2", "--quiet"]
        a = json.loads(self.ok("train", spec, *args).stdout.strip().splitlines()[-1])["run_id"]
        b = json.loads(self.ok("train", spec, *args).stdout.strip().splitlines()[-1])["run_id"]
        self.ok("model", "register", a, "--name", "m")
        plugins = os.path.join(self.home, "plugins")
        os.makedirs(plugins)
        shutil.copy(MARKER_SO, os.path.join(plugins, "marker.so"))
        shutil.copy(os.path.join(GOOD, "ember-seblock.so"), plugins)
        for cmd in (["runs"], ["runs", "--json"], ["run", "show", a], ["run", "show", b, "--json"],
                    ["compare", a, b], ["metrics", a, "loss"], ["models"],
                    ["model", "versions", "m"], ["devices"], ["gc", "--dry-run"],
                    ["info", spec], ["run", "tag", a, "k=v"], ["run", "note", a, "hi"],
                    ["runs", "--plugin-dir", plugins]):
            with self.subTest(cmd=cmd):
                self.ok(*cmd)
                self.assertFalse(self.ran(), "ember %s loaded the plugins" % " ".join(map(str, cmd)))
        # a spec that names a layer no built-in provides: loaded then
        se = os.path.join(self.tmp, "se.json")
        with open(se, "w") as f:
            json.dump({"name": "se", "input": {"shape": [4, 3, 3]},
                       "nodes": [{"name": "se", "type": "SEBlock", "reduction": 2}]}, f)
        p = self.ok("info", se)
        self.assertIn("SEBlock", p.stdout)
        self.assertTrue(self.ran())
        os.unlink(self.marker)
        j = json.loads(self.ok("plugins", "--json").stdout)
        self.assertEqual(sorted(e["name"] for e in j["plugins"]), ["marker", "seblock"])
        self.assertTrue(self.ran())


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
