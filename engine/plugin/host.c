/* host.c: loading plugins. Each "*.so" is opened with dlopen (RTLD_NOW |
 * RTLD_LOCAL: every symbol resolved now, none leaking into the next
 * plugin), its entry point's table checked (API version first), and its
 * init run against a host that stages the registrations; they are
 * committed only when init succeeds and every name is free, else rolled
 * back and the module closed. Every file tried is recorded, loaded or
 * refused with the reason, for `ember plugins` and for the messages of a
 * spec that names a layer type nobody provides. */
#include "plugin-host.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nn/nn-spec.h"

#define MAX_PLUGINS 256 /* files tried, loaded or refused */
#define MAX_DIR_FILES 64 /* "*.so" files tried per folder, in name order */
#define MAX_DIRS 32
#define MAX_STAGED 16

struct em_plugin_host {
  em_plugin_info *info;
  bool open; /* init is running: registrations are accepted */
  const em_layer_type *layers[MAX_STAGED];
  em_layer_onnx_fn onnx[MAX_STAGED];
  int n_layers;
  const em_dataset_type *datasets[MAX_STAGED];
  int n_datasets;
  const em_metric_type *metrics[MAX_STAGED];
  int n_metrics;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* one load at a time */
static em_plugin_info plugins[MAX_PLUGINS];
/* hosts[i]: plugins[i]'s host; it outlives the init (closed), so that a
 * plugin calling em_plugin_add_* later gets an error, not a dead frame. */
static em_plugin_host hosts[MAX_PLUGINS];
static int n_plugins;
static struct {
  char path[1024];
  char origin[32];
  bool exists;
} dirs[MAX_DIRS];
static int n_dirs;

/* ---- staging (called by a plugin's init) ----------------------------------- */

static em_status check_open(em_plugin_host *h, const char *what, int n, em_error *err) {
  if (!h || !h->open)
    return em_error_set(err, EM_ERR_INVALID, "em_plugin_add_%s may only be called from init", what);
  if (n == MAX_STAGED)
    return em_error_set(err, EM_ERR_INVALID, "a plugin may register at most %d %ss", MAX_STAGED,
                        what);
  return EM_OK;
}

em_status em_plugin_add_layer(em_plugin_host *h, const em_layer_type *type, em_layer_onnx_fn onnx,
                              em_error *err) {
  em_status st = check_open(h, "layer", h ? h->n_layers : 0, err);
  if (st != EM_OK) return st;
  if (!type || !type->name || !type->name[0])
    return em_error_set(err, EM_ERR_INVALID, "layer type without a name");
  for (int i = 0; i < h->n_layers; i++)
    if (!strcmp(h->layers[i]->name, type->name))
      return em_error_set(err, EM_ERR_INVALID, "layer type '%s' registered twice", type->name);
  h->onnx[h->n_layers] = onnx;
  h->layers[h->n_layers++] = type;
  return EM_OK;
}

em_status em_plugin_add_dataset(em_plugin_host *h, const em_dataset_type *kind, em_error *err) {
  em_status st = check_open(h, "dataset", h ? h->n_datasets : 0, err);
  if (st != EM_OK) return st;
  if (!kind || !kind->name || !kind->name[0])
    return em_error_set(err, EM_ERR_INVALID, "dataset kind without a name");
  for (int i = 0; i < h->n_datasets; i++)
    if (!strcmp(h->datasets[i]->name, kind->name))
      return em_error_set(err, EM_ERR_INVALID, "dataset kind '%s' registered twice", kind->name);
  h->datasets[h->n_datasets++] = kind;
  return EM_OK;
}

em_status em_plugin_add_metric(em_plugin_host *h, const em_metric_type *metric, em_error *err) {
  em_status st = check_open(h, "metric", h ? h->n_metrics : 0, err);
  if (st != EM_OK) return st;
  if (!metric || !metric->name || !metric->name[0])
    return em_error_set(err, EM_ERR_INVALID, "metric without a name");
  for (int i = 0; i < h->n_metrics; i++)
    if (!strcmp(h->metrics[i]->name, metric->name))
      return em_error_set(err, EM_ERR_INVALID, "metric '%s' registered twice", metric->name);
  h->metrics[h->n_metrics++] = metric;
  return EM_OK;
}

/* ---- commit and rollback ----------------------------------------------------- */

static const char *provider_locked(const char *name);

static void rollback(em_plugin_host *h, int layers, int onnx, int datasets, int metrics) {
  for (int i = 0; i < onnx; i++) em_layer_onnx_remove(h->layers[i]);
  for (int i = 0; i < layers; i++) em_layer_unregister(h->layers[i]);
  for (int i = 0; i < datasets; i++) em_dataset_type_remove(h->datasets[i]);
  for (int i = 0; i < metrics; i++) em_metric_remove(h->metrics[i]);
}

/* Makes the staged registrations visible; all or nothing. */
static em_status commit(em_plugin_host *h, em_error *err) {
  for (int i = 0; i < h->n_layers; i++) {
    const char *nm = h->layers[i]->name;
    if (em_layer_type_find(nm)) {
      const char *o = provider_locked(nm);
      return em_error_set(err, EM_ERR_INVALID,
                          "layer type '%s' is already registered (%s%s%s)", nm,
                          o ? "by plugin '" : "built in", o ? o : "", o ? "'" : "");
    }
  }
  int nl = 0, no = 0, nd = 0, nm = 0;
  em_status st = EM_OK;
  for (; nl < h->n_layers && st == EM_OK; nl++)
    if ((st = em_layer_register(h->layers[nl], err)) != EM_OK) break;
  for (int i = 0; i < h->n_layers && st == EM_OK; i++)
    if (h->onnx[i]) {
      if ((st = em_layer_onnx_add(h->layers[i], h->onnx[i], err)) != EM_OK) break;
      no = i + 1;
    }
  for (; st == EM_OK && nd < h->n_datasets; nd++)
    if ((st = em_dataset_type_add(h->datasets[nd], err)) != EM_OK) break;
  for (; st == EM_OK && nm < h->n_metrics; nm++)
    if ((st = em_metric_add(h->metrics[nm], err)) != EM_OK) break;
  if (st != EM_OK) rollback(h, nl, no, nd, nm);
  return st;
}

/* ---- loading ------------------------------------------------------------------ */

/* A truncating copy (names and paths that do not fit are cut). */
static void copy_str(char *dst, size_t n, const char *s) {
  size_t len = s ? strlen(s) : 0;
  if (len >= n) len = n - 1;
  if (len) memcpy(dst, s, len);
  dst[len] = 0;
}

static em_plugin_info *new_record(const char *path) {
  if (n_plugins == MAX_PLUGINS) return NULL;
  em_plugin_info *p = &plugins[n_plugins++];
  memset(p, 0, sizeof *p);
  p->fd = -1;
  copy_str(p->path, sizeof p->path, path);
  return p;
}

/* dlopen maps an ELF file's segments as its program headers say; one
 * that lies past the end of a truncated file (a half-finished copy) is
 * mapped anyway, and touching it kills the process with SIGBUS. So a
 * file that is ELF is read first (from fd, the file that will be loaded):
 * false, with why, when a segment or the headers end past the file. A
 * file that is not ELF is left to dlopen, whose message says so. */
static bool elf_whole(int fd, const struct stat *sb, char *why, size_t cap) {
  Elf64_Ehdr eh;
  bool ok = true;
  if (S_ISREG(sb->st_mode) && pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh &&
      !memcmp(eh.e_ident, ELFMAG, SELFMAG) && eh.e_ident[EI_CLASS] == ELFCLASS64) {
    uint64_t size = (uint64_t)sb->st_size;
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > size ||
        (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > size - eh.e_phoff)
      ok = false;
    for (int i = 0; ok && i < eh.e_phnum; i++) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph)) !=
          (ssize_t)sizeof ph)
        ok = false;
      else if (ph.p_type == PT_LOAD && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
        ok = false;
    }
    if (!ok)
      snprintf(why, cap, "it is truncated (%llu bytes, and its ELF headers place code or data "
               "past the end): a copy that did not finish?", (unsigned long long)size);
  }
  return ok;
}

/* ---- trust: who could have written the file --------------------------------- */

/* A plugin's code runs as whoever loads it, with all their rights. So a
 * plugin is loaded only when nobody else could have written it: the file
 * and the folder holding it are owned by the user running Ember (its
 * effective uid) or by root, and neither is writable by group or others.
 * (A folder others may write could gain a new "*.so", or have the file
 * replaced by another; sticky folders such as /tmp are refused too.)
 * The folder the file is in is checked, and the plugin folder that was
 * named (em_plugins_load_dir), which is another one when its "*.so" is a
 * symbolic link: anyone who may write the named folder could put a link
 * there to any file of yours or root's. The folders above are not. */
static bool trusted(const struct stat *sb, const char *what, const char *path, char *why,
                    size_t cap) {
  uid_t me = geteuid();
  bool dir = S_ISDIR(sb->st_mode);
  if (sb->st_uid != me && sb->st_uid != 0) {
    snprintf(why, cap, "%s %.300s is owned by uid %u, not by you (uid %u) nor root: a plugin "
             "runs as you, so only your own files (or root's) are loaded; if you trust it, "
             "chown %u %.300s, or copy it into a plugin folder of your own",
             what, path, (unsigned)sb->st_uid, (unsigned)me, (unsigned)me, path);
    return false;
  }
  if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, cap, "%s %.300s is writable by %s (mode %04o): anyone who can write it could "
             "run code as you; chmod go-w %.300s, or move the plugin%s to a folder only you can "
             "write", what, path,
             (sb->st_mode & S_IWOTH) ? ((sb->st_mode & S_IWGRP) ? "group and others" : "others")
                                     : "its group",
             (unsigned)(sb->st_mode & 07777), path, dir ? "s" : "");
    return false;
  }
  return true;
}

/* Opens the plugin at path (absolute, resolved) for loading: its folder,
 * then the file inside that very folder with O_NOFOLLOW (a symbolic link
 * put in its place is not followed), each checked with fstat on what was
 * opened, so that what is checked, hashed and loaded is one file whatever
 * is renamed meanwhile. Returns the fd, or -1 with why. */
static int open_trusted(const char *path, struct stat *sb, char *why, size_t cap) {
  const char *slash = strrchr(path, '/');
  char dir[PATH_MAX];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  const char *base = slash ? slash + 1 : path;
  int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    snprintf(why, cap, "cannot open its folder %.300s: %s", dir, strerror(errno));
    return -1;
  }
  struct stat ds;
  if (fstat(dfd, &ds) != 0) {
    snprintf(why, cap, "cannot stat its folder %.300s: %s", dir, strerror(errno));
    close(dfd);
    return -1;
  }
  if (!trusted(&ds, "its folder", dir, why, cap)) {
    close(dfd);
    return -1;
  }
  int fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  int e = errno;
  close(dfd);
  if (fd < 0) {
    snprintf(why, cap, e == ELOOP ? "it is a symbolic link (not followed)" : "cannot open it: %s",
             strerror(e));
    return -1;
  }
  if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
    snprintf(why, cap, "it is not a regular file");
    close(fd);
    return -1;
  }
  if (!trusted(sb, "the file", path, why, cap)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Names and versions end up in run tags ("<version> sha256:<hash> <path>")
 * and one-line listings: printable, no spaces, and short enough to keep
 * whole. */
static bool is_token(const char *s, size_t max, const char *extra) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > max) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr(extra, s[i])) return false;
  return true;
}

/* A description on one line: control characters become spaces. */
static void copy_line(char *dst, size_t n, const char *s) {
  copy_str(dst, n, s);
  for (char *c = dst; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
}


static em_status load_locked(const char *path, em_plugin_verify_fn verify, void *user,
                             em_error *err) {
  for (int i = 0; i < n_plugins; i++)
    if (!strcmp(plugins[i].path, path)) { /* the same file twice: say what happened then */
      if (plugins[i].loaded) return EM_OK;
      return em_error_set(err, EM_ERR_INVALID, "%s", plugins[i].reason);
    }
  em_plugin_info *info = new_record(path);
  if (!info)
    return em_error_set(err, EM_ERR_NOMEM, "plugin %.300s not tried: %d plugin files were "
                        "tried already, the most one process takes", path, MAX_PLUGINS);
  em_error e = {0};
  em_status st = EM_OK;
  void *dl = NULL;
  const em_plugin_table *t = NULL;
  char why[900], proc[64] = "";
  struct stat sb;
  int fd = -1;
  if (strlen(path) >= sizeof info->path)
    st = em_error_set(&e, EM_ERR_INVALID, "its path is longer than %zu bytes",
                      sizeof info->path - 1);
  else if ((fd = open_trusted(path, &sb, why, sizeof why)) < 0)
    st = em_error_set(&e, EM_ERR_INVALID, "%s", why);
  else if (!elf_whole(fd, &sb, why, sizeof why))
    st = em_error_set(&e, EM_ERR_FORMAT, "%s", why);
  else if (verify && (st = verify(fd, path, user, &e)) != EM_OK) {
    if (!e.msg[0]) em_error_set(&e, st, "its check failed");
  } else {
    /* dlopen of the descriptor already checked (and hashed), not of the
     * path again: between a check of the path and dlopen(path) the file
     * could be replaced, and dlopen runs a module's constructors before
     * anything else can look at it. glibc's dlopen of /proc/self/fd/N
     * maps exactly the file that fd holds open. (A module whose RUNPATH
     * uses $ORIGIN would look in /proc/self/fd: plugins have none.)
     * glibc knows a loaded module by that name, too, and a later dlopen
     * of the same name answers the module already loaded: so the
     * descriptor stays open for as long as the module may be mapped (the
     * life of the process), and no later plugin gets its number. */
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (!(dl = dlopen(proc, RTLD_NOW | RTLD_LOCAL))) {
      const char *msg = dlerror();
      size_t pl = strlen(proc);
      if (msg && !strncmp(msg, proc, pl) && msg[pl] == ':') msg += pl + 1 + (msg[pl + 1] == ' ');
      st = em_error_set(&e, EM_ERR_IO, "cannot load it: %s", msg ? msg : "dlopen failed");
    }
  }
  if (fd >= 0 && !dl) close(fd); /* else kept: see above */
  if (st == EM_OK) {
    dlerror();
    em_plugin_entry_fn entry;
    *(void **)&entry = dlsym(dl, EM_PLUGIN_ENTRY_SYMBOL);
    if (!entry)
      st = em_error_set(&e, EM_ERR_INVALID,
                        "it has no %s() function: not an Ember plugin (see em-plugin.h)",
                        EM_PLUGIN_ENTRY_SYMBOL);
    else if (!(t = entry()))
      st = em_error_set(&e, EM_ERR_INVALID, "its %s() returned no table", EM_PLUGIN_ENTRY_SYMBOL);
    else if (t->api_version != EM_PLUGIN_API_VERSION)
      st = em_error_set(&e, EM_ERR_UNSUPPORTED,
                        "it was built for plugin API version %d, this Ember has version %d: "
                        "rebuild it against this Ember's em-plugin.h",
                        t->api_version, EM_PLUGIN_API_VERSION);
  }
  if (st == EM_OK) {
    copy_line(info->name, sizeof info->name, t->name);
    copy_line(info->version, sizeof info->version, t->version);
    copy_line(info->description, sizeof info->description, t->description);
    if (!t->name || !t->name[0] || !t->init)
      st = em_error_set(&e, EM_ERR_INVALID, "its table has no name or no init function");
    else if (!is_token(t->name, sizeof info->name - 1, "._+-"))
      st = em_error_set(&e, EM_ERR_INVALID, "its name '%s' is not 1 to %zu letters, digits, "
                        "'.', '_', '+' or '-'", info->name, sizeof info->name - 1);
    else if (t->version && t->version[0] &&
             !is_token(t->version, sizeof info->version - 1, "._+-~:"))
      st = em_error_set(&e, EM_ERR_INVALID, "its version '%s' is not 1 to %zu letters, digits "
                        "or '.', '_', '+', '-', '~', ':' (no spaces)", info->version,
                        sizeof info->version - 1);
    for (int i = 0; st == EM_OK && i < n_plugins - 1; i++)
      if (plugins[i].loaded && !strcmp(plugins[i].name, t->name))
        st = em_error_set(&e, EM_ERR_INVALID, "a plugin named '%s' is already loaded (from %s)",
                          t->name, plugins[i].path);
  }
  em_plugin_host *h = &hosts[info - plugins];
  *h = (em_plugin_host){.info = info};
  if (st == EM_OK) {
    h->open = true;
    em_layer_register_hold(true);
    em_error ie = {0};
    em_status ist = t->init(h, &ie);
    em_layer_register_hold(false);
    h->open = false;
    if (ist != EM_OK)
      st = em_error_set(&e, ist, "its init failed: %s", ie.msg[0] ? ie.msg : em_status_name(ist));
    else if ((st = commit(h, &ie)) != EM_OK)
      st = em_error_set(&e, st, "%s", ie.msg);
  }
  if (st != EM_OK) {
    copy_str(info->reason, sizeof info->reason, e.msg);
    if (dl) dlclose(dl);
    if (err) {
      err->status = st;
      snprintf(err->msg, sizeof err->msg, "plugin %.300s refused: %.680s", path, e.msg);
    }
    return st;
  }
  info->loaded = true; /* dl stays open for the life of the process, and fd with it */
  info->fd = fd;
  for (int i = 0; i < h->n_layers; i++) info->layers[info->n_layers++] = h->layers[i]->name;
  for (int i = 0; i < h->n_datasets; i++)
    info->datasets[info->n_datasets++] = h->datasets[i]->name;
  for (int i = 0; i < h->n_metrics; i++) info->metrics[info->n_metrics++] = h->metrics[i]->name;
  return EM_OK;
}

em_status em_plugin_load_file(const char *path, em_error *err) {
  return em_plugin_load_file_verified(path, NULL, NULL, err);
}

em_status em_plugin_load_file_verified(const char *path, em_plugin_verify_fn verify, void *user,
                                       em_error *err) {
  char abs[PATH_MAX];
  const char *p = realpath(path, abs) ? abs : path;
  pthread_mutex_lock(&lock);
  em_status st = load_locked(p, verify, user, err);
  pthread_mutex_unlock(&lock);
  return st;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_plugin_file(const char *n) {
  size_t len = strlen(n);
  return len > 3 && !strcmp(n + len - 3, ".so") && n[0] != '.';
}

int em_plugins_load_dir(const char *dir, const char *origin) {
  if (!dir || !dir[0]) return 0;
  char abs[PATH_MAX];
  const char *d = realpath(dir, abs) ? abs : dir;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_dirs; i++)
    if (!strcmp(dirs[i].path, d)) {
      pthread_mutex_unlock(&lock);
      return 0;
    }
  /* the folder is checked on the descriptor it is listed from */
  int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dh = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (dfd >= 0 && !dh) close(dfd);
  if (n_dirs < MAX_DIRS) {
    copy_str(dirs[n_dirs].path, sizeof dirs[n_dirs].path, d);
    copy_str(dirs[n_dirs].origin, sizeof dirs[n_dirs].origin, origin ? origin : "");
    dirs[n_dirs++].exists = dh != NULL || errno != ENOENT; /* there, if unreadable */
  }
  int refused = 0;
  if (!dh) {
    bool optional = origin && (!strcmp(origin, "default") || !strcmp(origin, "installed"));
    if (errno != ENOENT || !optional) /* a folder someone named must be there */
      em_log_msg(EM_LOG_WARNING, "plugin folder %s (%s): %s", d, origin ? origin : "",
                 strerror(errno));
    pthread_mutex_unlock(&lock);
    return 0;
  }
  /* every name first, so that the files tried are the first in name
   * order whatever order the folder lists them in */
  char **names = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(dh))) {
    if (!is_plugin_file(de->d_name)) continue;
    if (n == cap) {
      char **more = realloc(names, sizeof *names * (size_t)(cap = cap ? 2 * cap : 16));
      if (!more) break;
      names = more;
    }
    if ((names[n] = strdup(de->d_name))) n++;
  }
  struct stat ds;
  char dir_why[900] = "";
  if (fstat(dirfd(dh), &ds) != 0)
    snprintf(dir_why, sizeof dir_why, "cannot stat its folder %.300s: %s", d,
             strerror(errno));
  else
    trusted(&ds, "its folder", d, dir_why, sizeof dir_why);
  closedir(dh);
  if (n) qsort(names, (size_t)n, sizeof names[0], cmp_str);
  if (n > MAX_DIR_FILES) {
    em_log_msg(EM_LOG_WARNING, "plugin folder %s holds %d \"*.so\" files: only the first %d "
               "in name order are tried (%s is the first left out)", d, n, MAX_DIR_FILES,
               names[MAX_DIR_FILES]);
    for (int i = MAX_DIR_FILES; i < n; i++) free(names[i]);
    n = MAX_DIR_FILES;
  }
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", d, names[i]);
    char real[PATH_MAX];
    const char *p = realpath(path, real) ? real : path;
    em_error e = {0};
    if (dir_why[0]) { /* recorded as named: the link's target may load from elsewhere */
      em_plugin_info *info = new_record(path);
      if (info) copy_str(info->reason, sizeof info->reason, dir_why);
      em_log_msg(EM_LOG_WARNING, "plugin %.300s refused: %s", path, dir_why);
      refused++;
    } else if (load_locked(p, NULL, NULL, &e) != EM_OK) {
      em_log_msg(EM_LOG_WARNING, "%s", e.msg);
      refused++;
    }
    free(names[i]);
  }
  free(names);
  pthread_mutex_unlock(&lock);
  return refused;
}

/* ---- loading on the first miss ------------------------------------------------ */

static void (*miss_loader)(void);
static pthread_once_t miss_once = PTHREAD_ONCE_INIT;
/* Set while the loader runs on this thread: a lookup it makes (commit's
 * check that a layer name is free) must not start it again. */
static _Thread_local bool in_miss_loader;

static void run_miss_loader(void) {
  in_miss_loader = true;
  miss_loader();
  in_miss_loader = false;
}

void em_plugin_set_loader(void (*load)(void)) { miss_loader = load; }

bool em_plugin_load_on_miss(void) {
  if (!miss_loader || in_miss_loader) return false;
  pthread_once(&miss_once, run_miss_loader); /* other threads wait for it */
  return true;
}

int em_plugin_count(void) {
  pthread_mutex_lock(&lock);
  int n = n_plugins;
  pthread_mutex_unlock(&lock);
  return n;
}

const em_plugin_info *em_plugin_at(int i) {
  pthread_mutex_lock(&lock);
  const em_plugin_info *p = i >= 0 && i < n_plugins ? &plugins[i] : NULL;
  pthread_mutex_unlock(&lock);
  return p;
}

int em_plugin_dir_count(void) {
  pthread_mutex_lock(&lock);
  int n = n_dirs;
  pthread_mutex_unlock(&lock);
  return n;
}

const char *em_plugin_dir_at(int i, const char **origin, bool *exists) {
  pthread_mutex_lock(&lock);
  const char *p = NULL;
  if (i >= 0 && i < n_dirs) {
    p = dirs[i].path;
    if (origin) *origin = dirs[i].origin;
    if (exists) *exists = dirs[i].exists;
  }
  pthread_mutex_unlock(&lock);
  return p;
}

static const char *provider_locked(const char *name) {
  const char *who = NULL;
  for (int i = 0; i < n_plugins && !who; i++) {
    const em_plugin_info *p = &plugins[i];
    if (!p->loaded) continue;
    for (int k = 0; k < p->n_layers && !who; k++)
      if (!strcmp(p->layers[k], name)) who = p->name;
    for (int k = 0; k < p->n_datasets && !who; k++)
      if (!strcmp(p->datasets[k], name)) who = p->name;
    for (int k = 0; k < p->n_metrics && !who; k++)
      if (!strcmp(p->metrics[k], name)) who = p->name;
  }
  return who;
}

const char *em_plugin_provider(const char *name) {
  pthread_mutex_lock(&lock);
  const char *who = provider_locked(name);
  pthread_mutex_unlock(&lock);
  return who;
}

void em_plugin_search_summary(char *buf, size_t n) {
  if (!n) return;
  buf[0] = 0;
  size_t len = 0;
#define PUT(...)                                                           \
  do {                                                                     \
    if (len < n) {                                                         \
      int k_ = snprintf(buf + len, n - len, __VA_ARGS__);                  \
      if (k_ > 0) len += (size_t)k_;                                       \
    }                                                                      \
  } while (0)
  pthread_mutex_lock(&lock);
  if (!n_dirs) PUT("no plugin folder was searched");
  else PUT("plugin folders searched: ");
  for (int i = 0; i < n_dirs; i++)
    PUT("%s%s (%s%s)", i ? ", " : "", dirs[i].path, dirs[i].origin,
        dirs[i].exists ? "" : ", missing");
  int loaded = 0, refused = 0;
  for (int i = 0; i < n_plugins; i++) loaded += plugins[i].loaded;
  if (loaded) {
    PUT("; loaded: ");
    for (int i = 0, k = 0; i < n_plugins; i++)
      if (plugins[i].loaded) PUT("%s%s", k++ ? ", " : "", plugins[i].name);
  }
  for (int i = 0; i < n_plugins; i++)
    if (!plugins[i].loaded) {
      const char *base = strrchr(plugins[i].path, '/');
      PUT("%s%s (%s)", refused++ ? ", " : "; refused: ", base ? base + 1 : plugins[i].path,
          plugins[i].reason);
    }
  pthread_mutex_unlock(&lock);
#undef PUT
  if (len >= n && n > 4) memcpy(buf + n - 4, "...", 4);
}
