/* A qemu-user TCG plugin that counts the guest instructions executed in each function symbol of
 * the guest binary, for bench/peers/aarch64_dynamic_counts.py.
 *
 *   qemu-aarch64 -plugin tcg_insn_counts.so,out=FILE[,on=SYM,off=SYM][,blocks=on] BINARY ARGS...
 *
 * Each translated block, when it is translated, is cut into runs of instructions that share a
 * symbol (qemu_plugin_insn_symbol: the main binary's symbol table as qemu loaded it, with the
 * load bias of a PIE applied; code of shared libraries has none); each time the block executes,
 * every run adds its instruction count to its symbol's total. A block that exits early (a fault,
 * a syscall that does not return) is still counted whole, which never happens inside the
 * arithmetic loops measured here. With on=/off=, instructions count only from the moment a
 * block of the `on` symbol starts until one of the `off` symbol starts (every guest thread's,
 * so the workers of a parallel region count too); the markers' own instructions are left out
 * and the number of `on` executions is reported, so a caller can divide by the calls between.
 *
 * At exit it writes "COUNT<TAB>SYMBOL" lines, largest first, to FILE (or qemu's log), then
 * "# counted N", "# regions N" and "# all N" (every instruction, inside a region or not).
 * Symbols stay mangled; c++filt demangles them. With blocks=on each run is its own line,
 * "SYMBOL@0xADDRESS+INSTRUCTIONS" (the guest address of its first instruction; a PIE is loaded
 * at 0x5500000000): which paths of a function run, and how often, to set against objdump.
 *
 * Written against qemu's plugin API version 1, which Debian 12's qemu-user 7.2 loads (the one
 * tested; a qemu whose minimum API version is higher refuses it at load). qemu-plugin.h is not
 * packaged there, so the few entry points used are declared here from the API's documentation. */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- qemu's plugin API (version 1), as documented ---- */
typedef uint64_t qemu_plugin_id_t;
typedef struct {
  const char* target_name;
  struct {
    int min;
    int cur;
  } version;
  bool system_emulation;
  union {
    struct {
      int smp_vcpus;
      int max_vcpus;
    } system;
  };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb* tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void* userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void* userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb* tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void* userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void* userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb* tb);
struct qemu_plugin_insn* qemu_plugin_tb_get_insn(const struct qemu_plugin_tb* tb, size_t idx);
const char* qemu_plugin_insn_symbol(const struct qemu_plugin_insn* insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn* insn);
void qemu_plugin_outs(const char* string);

#define PLUGIN_EXPORT __attribute__((visibility("default")))
PLUGIN_EXPORT int qemu_plugin_version = 1;

/* ---- counting ---- */

/* One symbol's running total. Code without a symbol (shared libraries, the vDSO) shares one. */
struct symbol_count {
  const char* name;
  uint64_t insns; /* atomic */
  struct symbol_count* next;
};

/* A run of a block's instructions in one symbol; a run in a region marker switches counting. */
enum run_kind { kCountedRun, kRegionOn, kRegionOff };
struct insn_run {
  struct symbol_count* symbol;
  uint64_t num_insns;
  enum run_kind kind;
};

#define kNoSymbol "[no symbol: shared library or vDSO]"
#define kTableSize 4096

static struct symbol_count* symbol_table[kTableSize];
static pthread_mutex_t symbol_table_lock = PTHREAD_MUTEX_INITIALIZER;
static const char* out_path;
static const char* on_symbol;
static const char* off_symbol;
static bool by_block;
static int counting = 1;     /* atomic: 0 inside no region when on= is given */
static uint64_t num_regions; /* atomic */
static uint64_t all_insns;   /* atomic */

static struct symbol_count* symbol_count_for(const char* name) {
  uint64_t hash = 1469598103934665603ull; /* FNV-1a */
  for (const char* c = name; *c; ++c) hash = (hash ^ (unsigned char)*c) * 1099511628211ull;
  struct symbol_count** slot = &symbol_table[hash % kTableSize];
  pthread_mutex_lock(&symbol_table_lock);
  struct symbol_count* entry = *slot;
  while (entry && strcmp(entry->name, name) != 0) entry = entry->next;
  if (!entry) {
    entry = calloc(1, sizeof *entry);
    entry->name = strdup(name);
    entry->next = *slot;
    *slot = entry;
  }
  pthread_mutex_unlock(&symbol_table_lock);
  return entry;
}

static void on_run_executed(unsigned int vcpu_index, void* userdata) {
  (void)vcpu_index;
  const struct insn_run* run = userdata;
  __atomic_fetch_add(&all_insns, run->num_insns, __ATOMIC_RELAXED);
  if (__atomic_load_n(&counting, __ATOMIC_RELAXED))
    __atomic_fetch_add(&run->symbol->insns, run->num_insns, __ATOMIC_RELAXED);
}

static void on_region_marker(unsigned int vcpu_index, void* userdata) {
  (void)vcpu_index;
  const struct insn_run* run = userdata;
  __atomic_fetch_add(&all_insns, run->num_insns, __ATOMIC_RELAXED);
  if (run->kind == kRegionOn) {
    __atomic_store_n(&counting, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&num_regions, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(&counting, 0, __ATOMIC_RELAXED);
  }
}

static enum run_kind run_kind_of(const char* name) {
  if (on_symbol && strcmp(name, on_symbol) == 0) return kRegionOn;
  if (off_symbol && strcmp(name, off_symbol) == 0) return kRegionOff;
  return kCountedRun;
}

static void register_run(struct qemu_plugin_tb* tb, const char* name, uint64_t vaddr,
                         uint64_t num_insns) {
  /* Lives as long as the translated block may run: until exit (a block flushed from qemu's
   * cache leaks its few bytes). */
  struct insn_run* run = malloc(sizeof *run);
  run->kind = run_kind_of(name);
  if (by_block && run->kind == kCountedRun) {
    char key[4096];
    snprintf(key, sizeof key, "%s@0x%" PRIx64 "+%" PRIu64, name, vaddr, num_insns);
    run->symbol = symbol_count_for(key);
  } else {
    run->symbol = symbol_count_for(name);
  }
  run->num_insns = num_insns;
  qemu_plugin_register_vcpu_tb_exec_cb(
      tb, run->kind == kCountedRun ? on_run_executed : on_region_marker, QEMU_PLUGIN_CB_NO_REGS,
      run);
}

static void on_block_translated(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  (void)id;
  const size_t n = qemu_plugin_tb_n_insns(tb);
  const char* run_name = NULL;
  uint64_t run_vaddr = 0, run_length = 0;
  for (size_t i = 0; i < n; ++i) {
    const struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    const char* name = qemu_plugin_insn_symbol(insn);
    if (!name) name = kNoSymbol;
    if (run_name && strcmp(name, run_name) != 0) {
      register_run(tb, run_name, run_vaddr, run_length);
      run_length = 0;
    }
    if (run_length == 0) run_vaddr = qemu_plugin_insn_vaddr(insn);
    run_name = name;
    ++run_length;
  }
  if (run_name) register_run(tb, run_name, run_vaddr, run_length);
}

static int by_count_descending(const void* a, const void* b) {
  const uint64_t x = (*(struct symbol_count* const*)a)->insns;
  const uint64_t y = (*(struct symbol_count* const*)b)->insns;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void on_exit_report(qemu_plugin_id_t id, void* userdata) {
  (void)id;
  (void)userdata;
  size_t num_symbols = 0;
  for (size_t i = 0; i < kTableSize; ++i)
    for (struct symbol_count* e = symbol_table[i]; e; e = e->next) ++num_symbols;
  struct symbol_count** sorted = calloc(num_symbols + 1, sizeof *sorted);
  size_t k = 0;
  uint64_t counted = 0;
  for (size_t i = 0; i < kTableSize; ++i)
    for (struct symbol_count* e = symbol_table[i]; e; e = e->next) {
      sorted[k++] = e;
      counted += e->insns;
    }
  qsort(sorted, num_symbols, sizeof *sorted, by_count_descending);

  char* text = NULL;
  size_t text_size = 0;
  FILE* report = open_memstream(&text, &text_size);
  for (size_t i = 0; i < num_symbols && sorted[i]->insns > 0; ++i)
    fprintf(report, "%" PRIu64 "\t%s\n", sorted[i]->insns, sorted[i]->name);
  fprintf(report, "# counted %" PRIu64 "\n# regions %" PRIu64 "\n# all %" PRIu64 "\n", counted,
          num_regions, all_insns);
  fclose(report);
  FILE* out = out_path ? fopen(out_path, "w") : NULL;
  if (out) {
    fputs(text, out);
    fclose(out);
  } else {
    if (out_path) qemu_plugin_outs("tcg_insn_counts: cannot write out=; the counts follow\n");
    qemu_plugin_outs(text);
  }
  free(text);
  free(sorted);
}

PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc,
                                      char** argv) {
  (void)info;
  for (int i = 0; i < argc; ++i) {
    if (strncmp(argv[i], "out=", 4) == 0) {
      out_path = argv[i] + 4;
    } else if (strncmp(argv[i], "on=", 3) == 0) {
      on_symbol = argv[i] + 3;
    } else if (strncmp(argv[i], "off=", 4) == 0) {
      off_symbol = argv[i] + 4;
    } else if (strcmp(argv[i], "blocks=on") == 0) {
      by_block = true;
    } else {
      fprintf(stderr,
              "tcg_insn_counts: unknown argument %s (out=FILE, on=SYMBOL, off=SYMBOL, "
              "blocks=on)\n",
              argv[i]);
      return 1;
    }
  }
  if (!on_symbol != !off_symbol) {
    fprintf(stderr, "tcg_insn_counts: on= and off= go together\n");
    return 1;
  }
  if (on_symbol) counting = 0;
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_block_translated);
  qemu_plugin_register_atexit_cb(id, on_exit_report, NULL);
  return 0;
}
