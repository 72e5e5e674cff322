/* UCX's log lines on stderr, never stdout.
 *
 * UCX prints its log (e.g. "sock.c:325 UCX ERROR connect(...) failed:
 * Connection refused") to stdout unless UCX_LOG_FILE names a file, and reads
 * that option when the library loads, before main. A program whose stdout
 * is its answer (`pmwire smr get`) then printed UCX's lines before the
 * value. This handler, pushed in front of UCX's default one, prints each
 * line UCX dispatches (only those its log level enables reach a handler)
 * to stderr in UCX's own shape and stops the default handler. A C shim,
 * since the handler takes a va_list. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <ucs/debug/log_def.h>

static ucs_log_func_rc_t pmwire_ucx_log(const char *file, unsigned line, const char *function,
                                        ucs_log_level_t level, const ucs_log_component_config_t *comp_conf,
                                        const char *message, va_list ap) {
    (void)function;
    (void)comp_conf;
    const char *base = strrchr(file, '/');
    const char *name = (level >= 0 && level < UCS_LOG_LEVEL_LAST) ? ucs_log_level_names[level] : "?";
    char text[1024];
    vsnprintf(text, sizeof text, message, ap);
    fprintf(stderr, "%s:%u UCX %s %s\n", base ? base + 1 : file, line, name, text);
    return UCS_LOG_FUNC_RC_STOP;
}

void pmwire_ucx_log_to_stderr(void) {
    ucs_log_push_handler(pmwire_ucx_log);
}
