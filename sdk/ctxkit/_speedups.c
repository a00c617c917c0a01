/* ctxkit._speedups: the first-seen text facts of the allocator in one C pass per text.
 *
 * Optional: built by `pip install -e sdk` where a C compiler exists (setup.py marks the
 * extension optional); ctxkit/context/text_native.py uses it when it loads and
 * CTXKIT_PURE_PYTHON is not set, and the pure-Python path in alloc_cache / ops_dedupe /
 * tokens stays the definition (sdk/tests/test_speedups.py checks both agree).
 *
 * text_facts(texts, wanted, min_chars) -> (made, rest)
 *   made: {text: (len(text) + 1, TextFacts(key, cjk, json_like, repeats, deduped_cjk))}
 *   rest: [text, ...] the texts it does not handle (the Python path works them out).
 *
 * A text is handled when every character is in the table given by configure(): ASCII, and
 * the BMP characters whose NFKC form is themselves (caseless, not whitespace, not a mark,
 * not a composition's second element) or one ASCII character (fullwidth forms, U+3000,
 * U+2000-200A, ...). For such text NFKC + casefold maps each character on its own, so the
 * fold, the whitespace collapse, the CJK count, the JSON-likeness and the line normal forms
 * all come out of one scan. Everything else (astral characters, lone surrogates, cased
 * non-ASCII, combining marks, other compatibility forms) goes to `rest`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* flags[c]: 1 handled, 2 CJK (as the estimator counts), 4 str.isspace() of c itself,
 * 8 folds to the one ASCII character image[c] (else c folds to itself), 16 folds to ASCII whitespace. */
#define F_HANDLED 1
#define F_CJK 2
#define F_SPACE 4
#define F_ASCII 8
#define F_FOLDSPACE 16

static PyObject *g_flags;      /* bytes, 65536 */
static PyObject *g_image;      /* bytes, 65536 */
static PyObject *g_facts_type; /* ctxkit.context.alloc_cache.TextFacts */
static PyObject *g_sha256;     /* hashlib.sha256 */
static PyObject *g_digest;     /* "digest" */

typedef struct {
    Py_ssize_t start, end;   /* the line's normal form: bytes [start, end) of the normal form */
    Py_ssize_t ostart, oend; /* the line in the original text: characters [ostart, oend) */
    Py_ssize_t cjk;          /* CJK characters of the original line */
} line_t;

/* One call's scratch buffers (grown as needed) and strong references to the configuration: a
 * Python call made on the way (hashlib may release the GIL, an allocation may run the collector)
 * can let another thread in, so nothing of a call lives in a global. */
typedef struct {
    unsigned char *buf;
    size_t buf_cap;
    line_t *lines;
    size_t lines_cap;
    Py_ssize_t *slots;
    size_t slots_cap;
    PyObject *flags_obj, *image_obj, *facts_type, *sha256;
    const unsigned char *flags, *image;
} scratch_t;

static int
scratch_open(scratch_t *sx)
{
    memset(sx, 0, sizeof(*sx));
    if (g_flags == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return -1;
    }
    sx->flags_obj = Py_NewRef(g_flags);
    sx->image_obj = Py_NewRef(g_image);
    sx->facts_type = Py_NewRef(g_facts_type);
    sx->sha256 = Py_NewRef(g_sha256);
    sx->flags = (const unsigned char *)PyBytes_AS_STRING(sx->flags_obj);
    sx->image = (const unsigned char *)PyBytes_AS_STRING(sx->image_obj);
    return 0;
}

static void
scratch_close(scratch_t *sx)
{
    PyMem_Free(sx->buf);
    PyMem_Free(sx->lines);
    PyMem_Free(sx->slots);
    Py_XDECREF(sx->flags_obj);
    Py_XDECREF(sx->image_obj);
    Py_XDECREF(sx->facts_type);
    Py_XDECREF(sx->sha256);
}

static int
grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = PyMem_Realloc(*p, n * size);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = n;
    return 0;
}

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *flags, *image, *facts_type, *sha256;
    if (!PyArg_ParseTuple(args, "SSOO:configure", &flags, &image, &facts_type, &sha256))
        return NULL;
    if (PyBytes_GET_SIZE(flags) != 65536 || PyBytes_GET_SIZE(image) != 65536) {
        PyErr_SetString(PyExc_ValueError, "the tables must have 65536 entries");
        return NULL;
    }
    if (!PyType_Check(facts_type) || !PyType_IsSubtype((PyTypeObject *)facts_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "facts_type must be a tuple subclass");
        return NULL;
    }
    Py_INCREF(flags);
    Py_XSETREF(g_flags, flags);
    Py_INCREF(image);
    Py_XSETREF(g_image, image);
    Py_INCREF(facts_type);
    Py_XSETREF(g_facts_type, facts_type);
    Py_INCREF(sha256);
    Py_XSETREF(g_sha256, sha256);
    Py_RETURN_NONE;
}

/* Whether a line's normal form has min_chars characters or more (UTF-8: count the lead bytes). */
static inline int
long_enough(const unsigned char *buf, const line_t *ln, Py_ssize_t min_chars)
{
    Py_ssize_t len = ln->end - ln->start;
    if (len < min_chars)
        return 0; /* fewer bytes, so fewer characters */
    Py_ssize_t chars = 0;
    for (Py_ssize_t i = ln->start; i < ln->end; i++)
        chars += (buf[i] & 0xC0) != 0x80;
    return chars >= min_chars;
}

/* A line's hash for the repeat check (equal lines are then compared byte by byte). */
static inline uint64_t
fnv1a(const unsigned char *p, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h ^ (h >> 32);
}

static const char HEX[] = "0123456789abcdef";

/* SHA-256 by the CPU's SHA extensions (x86-64 with SHA-NI, checked once at import): hashlib's
 * object costs about half a microsecond a text to make and ask, more than hashing a short text.
 * Elsewhere (other CPUs, and under valgrind, which does not offer the extensions) hashlib is used.
 * Either way the key is sha256(normal form)[:16 hex]; the tests compare it with hashlib's. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_NI_CODE 1

static const uint32_t SHA_K[64] __attribute__((aligned(16))) = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static int
cpu_has_sha_ni(void)
{
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19)))
        return 0; /* SSSE3, SSE4.1 */
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1; /* SHA */
}

/* The compression function over whole 64-byte blocks; state as FIPS 180-4's H0..H7. */
__attribute__((target("sha,sse4.1,ssse3"))) static void
sha256_blocks(uint32_t state[8], const unsigned char *data, size_t blocks)
{
    const __m128i MASK = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&state[0]);
    __m128i state1 = _mm_loadu_si128((const __m128i *)&state[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);          /* CDAB */
    state1 = _mm_shuffle_epi32(state1, 0x1B);    /* EFGH */
    __m128i state0 = _mm_alignr_epi8(tmp, state1, 8); /* ABEF */
    state1 = _mm_blend_epi16(state1, tmp, 0xF0); /* CDGH */
    while (blocks--) {
        __m128i abef = state0, cdgh = state1, msg[4];
        for (int i = 0; i < 16; i++) {
            if (i < 4) {
                msg[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * i)), MASK);
            }
            else { /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time */
                __m128i x = _mm_sha256msg1_epu32(msg[i & 3], msg[(i + 1) & 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(msg[(i + 3) & 3], msg[(i + 2) & 3], 4));
                msg[i & 3] = _mm_sha256msg2_epu32(x, msg[(i + 3) & 3]);
            }
            __m128i wk = _mm_add_epi32(msg[i & 3], _mm_load_si128((const __m128i *)&SHA_K[4 * i]));
            state1 = _mm_sha256rnds2_epu32(state1, state0, wk);
            state0 = _mm_sha256rnds2_epu32(state0, state1, _mm_shuffle_epi32(wk, 0x0E));
        }
        state0 = _mm_add_epi32(state0, abef);
        state1 = _mm_add_epi32(state1, cdgh);
        data += 64;
    }
    tmp = _mm_shuffle_epi32(state0, 0x1B);       /* FEBA */
    state1 = _mm_shuffle_epi32(state1, 0xB1);    /* DCHG */
    state0 = _mm_blend_epi16(tmp, state1, 0xF0); /* DCBA */
    state1 = _mm_alignr_epi8(state1, tmp, 8);    /* HGFE */
    _mm_storeu_si128((__m128i *)&state[0], state0);
    _mm_storeu_si128((__m128i *)&state[4], state1);
}

/* The first 8 bytes of sha256(buf[:n]). */
static void
sha256_head(const unsigned char *buf, Py_ssize_t n, unsigned char out[8])
{
    uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t whole = (size_t)n / 64;
    if (whole)
        sha256_blocks(state, buf, whole);
    unsigned char last[128];
    size_t rest = (size_t)n - whole * 64;
    memcpy(last, buf + whole * 64, rest);
    last[rest] = 0x80;
    size_t total = rest + 9 <= 64 ? 64 : 128;
    memset(last + rest + 1, 0, total - rest - 1);
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++)
        last[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha256_blocks(state, last, total / 64);
    for (int i = 0; i < 2; i++) {
        out[4 * i] = (unsigned char)(state[i] >> 24);
        out[4 * i + 1] = (unsigned char)(state[i] >> 16);
        out[4 * i + 2] = (unsigned char)(state[i] >> 8);
        out[4 * i + 3] = (unsigned char)state[i];
    }
}
#endif

static int g_sha_ni; /* set at import: the CPU has the SHA extensions */

static PyObject *
hex16(const unsigned char d[8])
{
    PyObject *key = PyUnicode_New(16, 127);
    if (key == NULL)
        return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(key);
    for (int i = 0; i < 8; i++) {
        out[2 * i] = HEX[d[i] >> 4];
        out[2 * i + 1] = HEX[d[i] & 15];
    }
    return key;
}

/* sha256(normal form)[:16 hex]: by the SHA extensions, else through hashlib's object. */
static PyObject *
key_of(PyObject *sha256, const unsigned char *buf, Py_ssize_t n)
{
#ifdef HAVE_SHA_NI_CODE
    if (g_sha_ni) {
        unsigned char d[8];
        sha256_head(buf, n, d);
        return hex16(d);
    }
#endif
    PyObject *data = PyBytes_FromStringAndSize((const char *)buf, n);
    if (data == NULL)
        return NULL;
    PyObject *h = PyObject_CallOneArg(sha256, data);
    Py_DECREF(data);
    if (h == NULL)
        return NULL;
    PyObject *digest = PyObject_CallMethodNoArgs(h, g_digest);
    Py_DECREF(h);
    if (digest == NULL)
        return NULL;
    if (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) < 8) {
        Py_DECREF(digest);
        PyErr_SetString(PyExc_TypeError, "digest() must return at least 8 bytes");
        return NULL;
    }
    PyObject *key = hex16((const unsigned char *)PyBytes_AS_STRING(digest));
    Py_DECREF(digest);
    return key;
}

/* key(data) -> sha256(data)[:16 hex] as text_facts makes it (for the tests). */
static PyObject *
key(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:key", &view))
        return NULL;
    if (g_sha256 == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    PyObject *out = key_of(g_sha256, (const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return out;
}

/* sha_ni(on=None) -> whether the SHA extensions are in use; on switches them (where the CPU has them). */
static PyObject *
sha_ni(PyObject *self, PyObject *args)
{
    PyObject *on = Py_None;
    if (!PyArg_ParseTuple(args, "|O:sha_ni", &on))
        return NULL;
    if (on != Py_None) {
        int want = PyObject_IsTrue(on);
        if (want < 0)
            return NULL;
#ifdef HAVE_SHA_NI_CODE
        g_sha_ni = want && cpu_has_sha_ni();
#endif
    }
    return PyBool_FromLong(g_sha_ni);
}

/* A TextFacts instance, as tuple.__new__(TextFacts, items) makes it; steals the references. */
static PyObject *
make_facts(PyObject *facts_type, PyObject *key, Py_ssize_t cjk, int json_like, PyObject *repeats, Py_ssize_t deduped_cjk)
{
    PyTypeObject *type = (PyTypeObject *)facts_type;
    PyObject *items[5];
    items[0] = key;
    items[1] = PyLong_FromSsize_t(cjk);
    items[2] = PyBool_FromLong(json_like);
    items[3] = repeats;
    items[4] = PyLong_FromSsize_t(deduped_cjk);
    PyObject *t = NULL;
    if (items[1] != NULL && items[4] != NULL)
        t = type->tp_alloc(type, 5);
    if (t == NULL) {
        for (int i = 0; i < 5; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

/* (text without its repeated lines, [[line, first line], ...]) and the CJK count of the former,
 * for a text with at least one repeat among its lines of min_chars characters or more. */
static PyObject *
dedupe(scratch_t *sx, PyObject *text, const unsigned char *buf, line_t *lines, Py_ssize_t nlines, Py_ssize_t min_chars,
       Py_ssize_t *deduped_cjk)
{
    size_t cap = 16;
    while (cap < (size_t)nlines * 2)
        cap *= 2;
    if (grow((void **)&sx->slots, &sx->slots_cap, cap, sizeof(Py_ssize_t)) < 0)
        return NULL;
    Py_ssize_t *slots = sx->slots;
    for (size_t i = 0; i < cap; i++)
        slots[i] = -1;
    PyObject *kept = PyList_New(0), *removed = PyList_New(0), *out = NULL;
    if (kept == NULL || removed == NULL)
        goto fail;
    Py_ssize_t cjk = 0;
    for (Py_ssize_t k = 0; k < nlines; k++) {
        line_t *ln = &lines[k];
        if (long_enough(buf, ln, min_chars)) {
            Py_ssize_t len = ln->end - ln->start;
            size_t j = (size_t)fnv1a(buf + ln->start, len) & (cap - 1);
            Py_ssize_t first = -1;
            while (slots[j] >= 0) {
                line_t *o = &lines[slots[j]];
                if (o->end - o->start == len && memcmp(buf + o->start, buf + ln->start, len) == 0) {
                    first = slots[j];
                    break;
                }
                j = (j + 1) & (cap - 1);
            }
            if (first >= 0) {
                PyObject *pair = Py_BuildValue("[nn]", k + 1, first + 1);
                if (pair == NULL || PyList_Append(removed, pair) < 0) {
                    Py_XDECREF(pair);
                    goto fail;
                }
                Py_DECREF(pair);
                continue;
            }
            slots[j] = k;
        }
        PyObject *piece = PyUnicode_Substring(text, ln->ostart, ln->oend);
        if (piece == NULL || PyList_Append(kept, piece) < 0) {
            Py_XDECREF(piece);
            goto fail;
        }
        Py_DECREF(piece);
        cjk += ln->cjk;
    }
    PyObject *sep = PyUnicode_FromOrdinal('\n');
    if (sep == NULL)
        goto fail;
    PyObject *joined = PyUnicode_Join(sep, kept);
    Py_DECREF(sep);
    if (joined == NULL)
        goto fail;
    out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(joined);
        goto fail;
    }
    PyTuple_SET_ITEM(out, 0, joined);
    PyTuple_SET_ITEM(out, 1, removed);
    Py_DECREF(kept);
    *deduped_cjk = cjk;
    return out;
fail:
    Py_XDECREF(kept);
    Py_XDECREF(removed);
    return NULL;
}

/* Whether any two lines of min_chars characters or more have the same normal form. */
static int
has_repeats(scratch_t *sx, const unsigned char *buf, line_t *lines, Py_ssize_t nlines, Py_ssize_t min_chars)
{
    size_t cap = 16;
    while (cap < (size_t)nlines * 2)
        cap *= 2;
    if (grow((void **)&sx->slots, &sx->slots_cap, cap, sizeof(Py_ssize_t)) < 0)
        return -1;
    Py_ssize_t *slots = sx->slots;
    for (size_t i = 0; i < cap; i++)
        slots[i] = -1;
    for (Py_ssize_t k = 0; k < nlines; k++) {
        line_t *ln = &lines[k];
        if (!long_enough(buf, ln, min_chars))
            continue;
        Py_ssize_t len = ln->end - ln->start;
        size_t j = (size_t)fnv1a(buf + ln->start, len) & (cap - 1);
        while (slots[j] >= 0) {
            line_t *o = &lines[slots[j]];
            if (o->end - o->start == len && memcmp(buf + o->start, buf + ln->start, len) == 0)
                return 1;
            j = (j + 1) & (cap - 1);
        }
        slots[j] = k;
    }
    return 0;
}

typedef struct {
    Py_ssize_t w;      /* bytes of the normal form */
    Py_ssize_t cjk;    /* CJK characters */
    Py_ssize_t nlines; /* lines recorded in g_lines: all of them (the last one too) */
} scan_t;

static inline int
record_line(scratch_t *sx, Py_ssize_t nlines, Py_ssize_t first, Py_ssize_t w, Py_ssize_t ostart, Py_ssize_t oend, Py_ssize_t cjk)
{
    if (grow((void **)&sx->lines, &sx->lines_cap, (size_t)nlines + 1, sizeof(line_t)) < 0)
        return -1;
    line_t *ln = &sx->lines[nlines];
    ln->start = first < 0 ? w : first; /* trailing whitespace is never written: the line ends at w */
    ln->end = w;
    ln->ostart = ostart;
    ln->oend = oend;
    ln->cjk = cjk;
    return 0;
}

/* One pass over a text of one kind: the normal form (NFKC, casefold, whitespace collapsed) into
 * buf as UTF-8, the CJK count and, with lines, each line's normal form (a slice of the text's:
 * tokens never span a line feed, so the text's normal form is its lines' joined by spaces).
 * 1 done, 0 not handled, -1 error. Inlined with a constant kind (and ascii: every character
 * below 128), one loop each. A token (a run of non-whitespace) is copied by the inner loop. */
static inline __attribute__((always_inline)) int
scan(scratch_t *sx, const int kind, const int ascii, const void *data, Py_ssize_t n, int lines, unsigned char *buf, scan_t *out)
{
    const unsigned char *flags = sx->flags, *image = sx->image;
    Py_ssize_t w = 0, cjk = 0, first = -1, ostart = 0, cjk0 = 0, nlines = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        unsigned int f = flags[c];
        if (f & F_FOLDSPACE) {
            if (!ascii)
                cjk += (f >> 1) & 1; /* U+3000 */
            if (c == '\n' && lines) { /* nothing else folds to a line feed (the table excludes it) */
                if (record_line(sx, nlines++, first, w, ostart, i, cjk - cjk0) < 0)
                    return -1;
                ostart = i + 1;
                cjk0 = cjk;
                first = -1;
            }
            i++;
            continue;
        }
        if (!ascii && f == 0)
            return 0;
        /* a token: one space before it unless it is the first (whitespace never is written) */
        if (w > 0)
            buf[w++] = ' ';
        if (first < 0)
            first = w;
        for (;;) {
            if (!ascii)
                cjk += (f >> 1) & 1;
            if (ascii || (f & F_ASCII)) {
                buf[w++] = image[c];
            }
            else {
                if (c < 0x800) {
                    buf[w++] = (unsigned char)(0xC0 | (c >> 6));
                    buf[w++] = (unsigned char)(0x80 | (c & 0x3F));
                }
                else {
                    buf[w++] = (unsigned char)(0xE0 | (c >> 12));
                    buf[w++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
                    buf[w++] = (unsigned char)(0x80 | (c & 0x3F));
                }
            }
            if (++i >= n)
                break;
            c = PyUnicode_READ(kind, data, i);
            f = flags[c];
            if ((f & F_FOLDSPACE) || (!ascii && f == 0))
                break;
        }
    }
    if (lines && nlines > 0 && record_line(sx, nlines++, first, w, ostart, n, cjk - cjk0) < 0)
        return -1;
    out->w = w;
    out->cjk = cjk;
    out->nlines = nlines;
    return 1;
}

/* (text, []): line_repeats' answer when no line repeats. */
static PyObject *
no_repeats(PyObject *text)
{
    PyObject *removed = PyList_New(0);
    if (removed == NULL)
        return NULL;
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(removed);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, Py_NewRef(text));
    PyTuple_SET_ITEM(t, 1, removed);
    return t;
}

/* The cache's entry (len(text) + 1, facts); steals facts. */
static PyObject *
cache_entry(PyObject *text, PyObject *facts)
{
    PyObject *size = PyLong_FromSsize_t(PyUnicode_GET_LENGTH(text) + 1);
    PyObject *t = size == NULL ? NULL : PyTuple_New(2);
    if (t == NULL) {
        Py_XDECREF(size);
        Py_DECREF(facts);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, size);
    PyTuple_SET_ITEM(t, 1, facts);
    return t;
}

/* The facts of one text, or Py_None (borrowed, not handled), or NULL on error. */
static PyObject *
facts_of(scratch_t *sx, PyObject *text, int wanted, Py_ssize_t min_chars)
{
    int kind = PyUnicode_KIND(text);
    if (kind == PyUnicode_4BYTE_KIND)
        return Py_None;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const void *data = PyUnicode_DATA(text);
    const unsigned char *flags = sx->flags;
    /* text.lstrip()[:1] in ("{", "["); an unhandled first character ends the text's chances anyway */
    Py_ssize_t i = 0;
    while (i < n && (flags[PyUnicode_READ(kind, data, i)] & F_SPACE))
        i++;
    int json_like = i < n && (PyUnicode_READ(kind, data, i) == '{' || PyUnicode_READ(kind, data, i) == '[');
    int lines = wanted && !json_like;
    if (grow((void **)&sx->buf, &sx->buf_cap, (size_t)n * 3 + 1, 1) < 0)
        return NULL;
    unsigned char *buf = sx->buf;
    scan_t sc;
    int done = PyUnicode_IS_ASCII(text)          ? scan(sx, PyUnicode_1BYTE_KIND, 1, data, n, lines, buf, &sc)
               : kind == PyUnicode_1BYTE_KIND ? scan(sx, PyUnicode_1BYTE_KIND, 0, data, n, lines, buf, &sc)
                                              : scan(sx, PyUnicode_2BYTE_KIND, 0, data, n, lines, buf, &sc);
    if (done < 0)
        return NULL;
    if (done == 0)
        return Py_None;
    Py_ssize_t w = sc.w, cjk = sc.cjk, nlines = sc.nlines;
    PyObject *key = key_of(sx->sha256, buf, w);
    if (key == NULL)
        return NULL;
    PyObject *repeats;
    Py_ssize_t deduped_cjk = 0;
    if (!lines) {
        repeats = Py_None;
        Py_INCREF(repeats);
    }
    else {
        int found = nlines > 0 ? has_repeats(sx, buf, sx->lines, nlines, min_chars) : 0;
        if (found < 0) {
            Py_DECREF(key);
            return NULL;
        }
        if (found)
            repeats = dedupe(sx, text, buf, sx->lines, nlines, min_chars, &deduped_cjk);
        else
            repeats = no_repeats(text);
        if (repeats == NULL) {
            Py_DECREF(key);
            return NULL;
        }
    }
    return make_facts(sx->facts_type, key, cjk, json_like, repeats, deduped_cjk);
}

static PyObject *
text_facts(PyObject *self, PyObject *args)
{
    PyObject *texts, *wanted;
    Py_ssize_t min_chars;
    if (!PyArg_ParseTuple(args, "O!O!n:text_facts", &PyList_Type, &texts, &PyList_Type, &wanted, &min_chars))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(wanted) != n) {
        PyErr_SetString(PyExc_ValueError, "texts and wanted differ in length");
        return NULL;
    }
    scratch_t sx;
    if (scratch_open(&sx) < 0) {
        scratch_close(&sx);
        return NULL;
    }
    PyObject *made = PyDict_New(), *rest = PyList_New(0);
    if (made == NULL || rest == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i);
        if (!PyUnicode_CheckExact(text)) {
            PyErr_SetString(PyExc_TypeError, "texts must be str");
            goto fail;
        }
        int want = PyObject_IsTrue(PyList_GET_ITEM(wanted, i));
        if (want < 0)
            goto fail;
        PyObject *facts = facts_of(&sx, text, want, min_chars);
        if (facts == NULL)
            goto fail;
        if (facts == Py_None) {
            if (PyList_Append(rest, text) < 0)
                goto fail;
            continue;
        }
        PyObject *entry = cache_entry(text, facts);
        if (entry == NULL || PyDict_SetItem(made, text, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
    }
    scratch_close(&sx);
    return Py_BuildValue("(NN)", made, rest);
fail:
    scratch_close(&sx);
    Py_XDECREF(made);
    Py_XDECREF(rest);
    return NULL;
}

/* facts_many(entries, texts, repeats, min_chars) -> (out, made, rest, rest_wanted): the loop of
 * alloc_cache.facts_many. out[i] is the known facts of texts[i] (entries: the cache's dict,
 * text -> (size, facts)) or the new facts made here, or None where the text is in rest (the
 * Python path's: rest_wanted says whether its line dedupe is wanted). */
static PyObject *
facts_many(PyObject *self, PyObject *args)
{
    PyObject *entries, *texts, *repeats;
    Py_ssize_t min_chars;
    if (!PyArg_ParseTuple(args, "O!O!O!n:facts_many", &PyDict_Type, &entries, &PyList_Type, &texts, &PyList_Type,
                          &repeats, &min_chars))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(repeats) != n) {
        PyErr_SetString(PyExc_ValueError, "texts and repeats differ in length");
        return NULL;
    }
    scratch_t sx;
    if (scratch_open(&sx) < 0) {
        scratch_close(&sx);
        return NULL;
    }
    PyObject *out = PyList_New(n), *todo = PyDict_New(), *made = PyDict_New(), *rest = PyList_New(0),
             *rest_wanted = PyList_New(0);
    if (out == NULL || todo == NULL || made == NULL || rest == NULL || rest_wanted == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i);
        int want = PyObject_IsTrue(PyList_GET_ITEM(repeats, i));
        if (want < 0)
            goto fail;
        PyObject *hit = PyDict_GetItemWithError(entries, text); /* borrowed */
        if (hit == NULL && PyErr_Occurred())
            goto fail;
        if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 2) {
            PyObject *known = PyTuple_GET_ITEM(hit, 1);
            if (PyTuple_Check(known) && PyTuple_GET_SIZE(known) >= 4 &&
                (PyTuple_GET_ITEM(known, 3) != Py_None || !want || PyTuple_GET_ITEM(known, 2) == Py_True)) {
                Py_INCREF(known);
                PyList_SET_ITEM(out, i, known);
                continue;
            }
        }
        Py_INCREF(Py_None);
        PyList_SET_ITEM(out, i, Py_None);
        int seen = want ? 0 : PyDict_Contains(todo, text); /* a text given twice: dedupe if either asks */
        if (seen < 0 || (!seen && PyDict_SetItem(todo, text, want ? Py_True : Py_False) < 0))
            goto fail;
    }
    Py_ssize_t pos = 0;
    PyObject *text, *wanted;
    while (PyDict_Next(todo, &pos, &text, &wanted)) {
        if (!PyUnicode_CheckExact(text)) {
            PyErr_SetString(PyExc_TypeError, "texts must be str");
            goto fail;
        }
        PyObject *facts = facts_of(&sx, text, wanted == Py_True, min_chars);
        if (facts == NULL)
            goto fail;
        if (facts == Py_None) {
            if (PyList_Append(rest, text) < 0 || PyList_Append(rest_wanted, wanted) < 0)
                goto fail;
            continue;
        }
        PyObject *entry = cache_entry(text, facts);
        if (entry == NULL || PyDict_SetItem(made, text, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_ITEM(out, i) != Py_None)
            continue;
        PyObject *entry = PyDict_GetItemWithError(made, PyList_GET_ITEM(texts, i)); /* borrowed */
        if (entry == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue; /* in rest */
        }
        PyObject *facts = PyTuple_GET_ITEM(entry, 1);
        Py_INCREF(facts);
        if (PyList_SetItem(out, i, facts) < 0) /* steals facts, drops the None */
            goto fail;
    }
    Py_DECREF(todo);
    scratch_close(&sx);
    return Py_BuildValue("(NNNN)", out, made, rest, rest_wanted);
fail:
    scratch_close(&sx);
    Py_XDECREF(out);
    Py_XDECREF(todo);
    Py_XDECREF(made);
    Py_XDECREF(rest);
    Py_XDECREF(rest_wanted);
    return NULL;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(flags, image, facts_type, sha256): the character tables and what text_facts makes"},
    {"text_facts", text_facts, METH_VARARGS,
     "text_facts(texts, wanted, min_chars) -> (made, rest): see the module's source"},
    {"facts_many", facts_many, METH_VARARGS,
     "facts_many(entries, texts, repeats, min_chars) -> (out, made, rest, rest_wanted): see the source"},
    {"key", key, METH_VARARGS, "key(data) -> sha256(data)[:16 hex], as text_facts makes it (tests)"},
    {"sha_ni", sha_ni, METH_VARARGS, "sha_ni(on=None) -> whether the CPU's SHA extensions hash the keys"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ctxkit._speedups", "Optional native helpers of ctxkit (see text_native.py).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
#ifdef HAVE_SHA_NI_CODE
    g_sha_ni = cpu_has_sha_ni();
#endif
    g_digest = PyUnicode_InternFromString("digest");
    if (g_digest == NULL)
        return NULL;
    return PyModule_Create(&module);
}
