/* olmax.data.jsonl_scan: prepare's JSON lines straight to UTF-8, with no Python string per text.

   scan(buf, start, end, head, text_key, id_key, strip, eos, eos_rule) reads the whole lines of
   head + buf[start:end] (`head`: the start of a line begun in an earlier buffer, or b""; the range ends
   just past a newline, or at the end of the input) and returns (texts, ends, items, added):

   - texts: bytes, the text field of every line read here, unescaped to UTF-8, back to back (each with
     Python's str.strip() applied when `strip`);
   - ends: bytes holding one native-endian int64 per such line, where its text ends in `texts` (with `eos`
     after it, when added);
   - items: a list with one entry per line, in order: the line's id (a str: the id field's string, or an
     integer id as str(int) writes it; None when the line has no id or a null one) when the line was read
     here, or a tuple (where the line starts in head + buf[start:end], the line's bytes) when it was not;
   - added: one byte per line read here, 1 when `eos` follows its text: eos_rule 0 never, 1 after every
     non-empty text, 2 after a non-empty text that does not end with `eos` already.

   A line is read here only when json.loads would give the same text and id: a JSON object, starting at
   its first byte, with valid UTF-8, strict JSON everywhere (no NaN or Infinity, no control character in a
   string, no lone surrogate escape), the text field once and a string, the id field at most once and a
   string, an integer or null, at most MAX_DEPTH levels deep. Every other line (a blank line, bad JSON,
   anything json.loads reads differently or refuses) is handed back whole, for the caller's json.loads
   path, which reads it or names its error exactly as it always has. So this module never decides that a
   line is bad; it only decides which lines it can read as json.loads would.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 256

typedef const unsigned char *cptr;

typedef struct {
    cptr p, end;
} Cur;

/* JSON's whitespace within a line: a newline ends the line (JSON lines hold none inside) */
static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

/* SWAR: a high bit in each byte of v that is zero (false positives only above a true zero byte) */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t zero_bytes(uint64_t v) { return (v - ONES) & ~v & HIGHS; }

#ifdef __SSE2__
#include <emmintrin.h>
/* One bit per byte of the 16 at p that needs care in a string: below 0x20, a quote, a backslash or
   non-ASCII (a signed byte below 0x20: the control characters and every byte from 0x80). */
#define BLOCK 16
#define SHIFT 0
static inline uint64_t special(cptr p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i care = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return (uint64_t)_mm_movemask_epi8(care);
}
#else
/* A high bit in each byte of the 8 at p that needs care (as above). The lowest one is exact (higher ones
   may be false), so the first such byte is at ctz(mask) / 8. */
#define BLOCK 8
#define SHIFT 3
static inline uint64_t special(cptr p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (v & HIGHS) | zero_bytes(v & (0xE0 * ONES)) | zero_bytes(v ^ (0x22 * ONES)) |
           zero_bytes(v ^ (0x5c * ONES));
}
#endif
#define SLACK 16 /* what string() may write past a text's end */

static inline int hex4(cptr p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= h - '0';
        else if (h >= 'a' && h <= 'f')
            v |= h - 'a' + 10;
        else if (h >= 'A' && h <= 'F')
            v |= h - 'A' + 10;
        else
            return 0;
    }
    *out = v;
    return 1;
}

/* The length of the valid UTF-8 sequence at p (Python's decoder: no overlong form, no surrogate, nothing
   past U+10FFFF), 0 when it is not one. p[0] >= 0x80. */
static inline int utf8_seq(cptr p, cptr end) {
    unsigned char b0 = p[0];
    if (b0 < 0xC2)
        return 0;
    if (b0 < 0xE0)
        return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (b0 < 0xF0) {
        if (end - p < 3)
            return 0;
        unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
        return (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80) ? 3 : 0;
    }
    if (b0 < 0xF5) {
        if (end - p < 4)
            return 0;
        unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
        return (p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) ? 4 : 0;
    }
    return 0;
}

static inline unsigned char *put_utf8(unsigned char *o, unsigned cp) {
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = 0xC0 | (cp >> 6);
        *o++ = 0x80 | (cp & 0x3F);
    } else if (cp < 0x10000) {
        *o++ = 0xE0 | (cp >> 12);
        *o++ = 0x80 | ((cp >> 6) & 0x3F);
        *o++ = 0x80 | (cp & 0x3F);
    } else {
        *o++ = 0xF0 | (cp >> 18);
        *o++ = 0x80 | ((cp >> 12) & 0x3F);
        *o++ = 0x80 | ((cp >> 6) & 0x3F);
        *o++ = 0x80 | (cp & 0x3F);
    }
    return o;
}

/* What a one-character escape stands for (0: not one; \u is read apart) */
static const unsigned char UNESCAPE[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b', ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

/* A JSON string at c->p (its opening quote), unescaped to UTF-8 at *out when `write` (the output is never
   longer than the input). Returns 0 when json.loads may read it otherwise or refuse it. Inlined twice, with
   `write` a constant: once writing, once only checking. */
static inline __attribute__((always_inline)) int string_at(Cur *c, unsigned char **out, const int write) {
    cptr p = c->p + 1, end = c->end;
    unsigned char *o = write ? *out : NULL;
    for (;;) {
        /* BLOCK bytes at a time while none needs care; when writing, they are stored whole (the buffer has
           SLACK bytes to spare past its end) and the pointer moves only past the plain ones */
        while (end - p >= BLOCK) {
            uint64_t m = special(p);
            if (write)
                memcpy(o, p, BLOCK);
            if (m) {
                int k = __builtin_ctzll(m) >> SHIFT;
                p += k;
                if (write)
                    o += k;
                goto care;
            }
            p += BLOCK;
            if (write)
                o += BLOCK;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') {
            if (write)
                *o++ = *p;
            p++;
        }
    care:
        if (p >= end)
            return 0;
        unsigned char ch = *p;
        if (ch == '\\') {
            if (end - p < 2)
                return 0;
            unsigned char b = UNESCAPE[p[1]];
            if (b) {
                if (write)
                    *o++ = b;
                p += 2;
                continue;
            }
            unsigned cp, lo;
            if (p[1] != 'u' || end - p < 6 || !hex4(p + 2, &cp))
                return 0;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return 0; /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return 0; /* a lone high surrogate */
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            if (write)
                o = put_utf8(o, cp);
            continue;
        }
        if (ch == '"') {
            c->p = p + 1;
            if (write)
                *out = o;
            return 1;
        }
        if (ch < 0x20)
            return 0; /* json.loads (strict) refuses a control character in a string */
        int n = utf8_seq(p, end); /* ch >= 0x80 */
        if (!n)
            return 0;
        if (write)
            for (int i = 0; i < n; i++)
                *o++ = p[i];
        p += n;
    }
}

static int string(Cur *c, unsigned char **out) {
    return out ? string_at(c, out, 1) : string_at(c, NULL, 0);
}

/* A JSON number at c->p; *integer says whether it has no fraction and no exponent */
static int number(Cur *c, int *integer) {
    cptr p = c->p, end = c->end;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return 0;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    else
        return 0;
    *integer = 1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *integer = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *integer = 0;
    }
    c->p = p;
    return 1;
}

static int literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static int value(Cur *c, int depth);

static int container(Cur *c, int depth, unsigned char close) {
    if (depth > MAX_DEPTH)
        return 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
    }
    for (;;) {
        if (close == '}') {
            if (c->p >= c->end || *c->p != '"' || !string(c, NULL))
                return 0;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':')
                return 0;
            c->p++;
            skip_ws(c);
        }
        if (!value(c, depth + 1))
            return 0;
        skip_ws(c);
        if (c->p >= c->end)
            return 0;
        if (*c->p == close) {
            c->p++;
            return 1;
        }
        if (*c->p != ',')
            return 0;
        c->p++;
        skip_ws(c);
    }
}

static int value(Cur *c, int depth) {
    int integer;
    if (c->p >= c->end)
        return 0;
    switch (*c->p) {
    case '{': return container(c, depth, '}');
    case '[': return container(c, depth, ']');
    case '"': return string(c, NULL);
    case 't': return literal(c, "true", 4);
    case 'f': return literal(c, "false", 5);
    case 'n': return literal(c, "null", 4);
    default: return number(c, &integer);
    }
}

/* the UTF-8 length of the code point starting at p, and the code point (valid UTF-8 assumed) */
static inline int decode(cptr p, unsigned *cp) {
    unsigned char b = p[0];
    if (b < 0x80) { *cp = b; return 1; }
    if (b < 0xE0) { *cp = ((b & 0x1F) << 6) | (p[1] & 0x3F); return 2; }
    if (b < 0xF0) { *cp = ((b & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F); return 3; }
    *cp = ((b & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    return 4;
}

/* what str.isspace() says of a code point (Python's Py_UNICODE_ISSPACE: bidirectional class WS, B or S,
   or general category Zs) */
static inline int is_space(unsigned cp) {
    if (cp < 0x80)
        return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* str.strip() of the UTF-8 text t[0:n]: its new start and length */
static void strip_utf8(unsigned char *t, Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *len) {
    Py_ssize_t a = 0, b = n;
    unsigned cp;
    while (a < b) {
        int k = decode(t + a, &cp);
        if (!is_space(cp))
            break;
        a += k;
    }
    while (b > a) {
        Py_ssize_t s = b - 1;
        while (s > a && (t[s] & 0xC0) == 0x80)
            s--;
        decode(t + s, &cp);
        if (!is_space(cp))
            break;
        b = s;
    }
    *start = a;
    *len = b - a;
}

static inline int key_is(cptr key, Py_ssize_t n, const char *want, Py_ssize_t want_n) {
    return n == want_n && memcmp(key, want, n) == 0;
}

/* The line at c->p (c->end: the end of the input): 1 when read here (its text written at *out, *id set to
   a new reference or Py_None, c->p just past its newline), 0 when it goes to json.loads (c->p anywhere),
   -1 on a Python error. */
static int line(Cur *c, unsigned char **out, const char *tk, Py_ssize_t tn, const char *ik, Py_ssize_t in,
                int strip, PyObject **id) {
    unsigned char *text = NULL, *text_end = NULL, *o = *out;
    PyObject *found_id = NULL;
    int seen_text = 0, seen_id = 0;
    if (c->p >= c->end || *c->p != '{')
        return 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}')
        goto no;
    for (;;) {
        if (c->p >= c->end || *c->p != '"')
            goto no;
        /* the key, unescaped at o (scratch: the output is never longer than the line) */
        unsigned char *k = o;
        if (!string(c, &k))
            goto no;
        Py_ssize_t kn = k - o;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':')
            goto no;
        c->p++;
        skip_ws(c);
        if (c->p >= c->end)
            goto no;
        if (key_is(o, kn, tk, tn)) {
            if (seen_text || *c->p != '"')
                goto no; /* twice (json.loads keeps the last) or not a string: json.loads' path says */
            seen_text = 1;
            text = o;
            unsigned char *w = o;
            if (!string(c, &w))
                goto no;
            text_end = w;
            o = w;
        } else if (key_is(o, kn, ik, in)) {
            if (seen_id)
                goto no;
            seen_id = 1;
            if (*c->p == '"') {
                unsigned char *w = o;
                if (!string(c, &w))
                    goto no;
                found_id = PyUnicode_DecodeUTF8((const char *)o, w - o, NULL);
                if (!found_id)
                    return -1;
            } else if (*c->p == 'n') {
                if (!literal(c, "null", 4))
                    goto no;
            } else {
                cptr num = c->p;
                int integer;
                if (!number(c, &integer) || !integer)
                    goto no;
                char digits[64];
                if (c->p - num >= (Py_ssize_t)sizeof digits)
                    goto no; /* an integer of more than 63 digits: json.loads' path */
                memcpy(digits, num, c->p - num);
                digits[c->p - num] = 0;
                PyObject *n = PyLong_FromString(digits, NULL, 10);
                if (!n)
                    return -1;
                found_id = PyObject_Str(n);
                Py_DECREF(n);
                if (!found_id)
                    return -1;
            }
        } else if (!value(c, 1)) {
            goto no;
        }
        skip_ws(c);
        if (c->p >= c->end)
            goto no;
        if (*c->p == '}') {
            c->p++;
            break;
        }
        if (*c->p != ',')
            goto no;
        c->p++;
        skip_ws(c);
    }
    skip_ws(c); /* json.loads reads the line without its "\r\n" and allows whitespace after the object */
    if (!seen_text || (c->p < c->end && *c->p != '\n'))
        goto no;
    if (c->p < c->end)
        c->p++;
    Py_ssize_t n = text_end - text;
    if (strip) {
        Py_ssize_t a, len;
        strip_utf8(text, n, &a, &len);
        if (a)
            memmove(text, text + a, len);
        n = len;
    }
    /* the text moves to the start of this line's output (a key or an id may have been written before it) */
    if (text != *out)
        memmove(*out, text, n);
    *out += n;
    *id = found_id ? found_id : Py_NewRef(Py_None);
    return 1;
no:
    Py_XDECREF(found_id);
    return 0;
}

typedef struct {
    const char *tk, *ik, *eos;
    Py_ssize_t tn, in, eos_n;
    int strip, eos_rule; /* eos_rule: 0 none, 1 after every text, 2 after a text that does not end with it */
    unsigned char *t0, *o; /* the texts' buffer and where the next text goes */
    int64_t *ends;
    char *added; /* per text read here: whether `eos` follows it */
    Py_ssize_t nread, cap;
    PyObject *items;
} Scan;

/* The line at p (stop: the end of the input), at `pos` from the start of what this call reads: its item
   appended; returns where the next line starts, NULL on a Python error. */
static cptr one_line(Scan *s, cptr p, cptr stop, Py_ssize_t pos) {
    Cur c = {p, stop};
    PyObject *id = NULL, *item;
    unsigned char *w = s->o;
    int r = line(&c, &w, s->tk, s->tn, s->ik, s->in, s->strip, &id);
    if (r < 0)
        return NULL;
    cptr next;
    if (r) {
        if (s->nread == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 256;
            int64_t *grown = PyMem_Realloc(s->ends, s->cap * sizeof(int64_t));
            char *flags = grown ? PyMem_Realloc(s->added, s->cap) : NULL;
            if (grown)
                s->ends = grown;
            if (!flags) {
                Py_DECREF(id);
                PyErr_NoMemory();
                return NULL;
            }
            s->added = flags;
        }
        /* EOS as text after a non-empty text (the caller has checked that the engine then gives the text's
           tokens and EOS, as if EOS were appended to them) */
        Py_ssize_t n = w - s->o;
        int add = s->eos_rule && n &&
                  (s->eos_rule == 1 || n < s->eos_n || memcmp(w - s->eos_n, s->eos, s->eos_n) != 0);
        if (add) {
            memcpy(w, s->eos, s->eos_n);
            w += s->eos_n;
        }
        s->added[s->nread] = (char)add;
        s->o = w;
        s->ends[s->nread++] = w - s->t0;
        item = id;
        next = c.p;
    } else {
        cptr nl = memchr(p, '\n', stop - p);
        next = nl ? nl + 1 : stop;
        item = Py_BuildValue("(ny#)", pos, (const char *)p, (Py_ssize_t)(next - p));
        if (!item)
            return NULL;
    }
    int failed = PyList_Append(s->items, item);
    Py_DECREF(item);
    return failed ? NULL : next;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, head;
    Py_ssize_t start, end;
    Scan s = {0};
    if (!PyArg_ParseTuple(args, "y*nny*y#y#py#i", &buf, &start, &end, &head, &s.tk, &s.tn, &s.ik, &s.in,
                          &s.strip, &s.eos, &s.eos_n, &s.eos_rule))
        return NULL;
    PyObject *texts = NULL, *result = NULL;
    unsigned char *joined = NULL;
    cptr base = (cptr)buf.buf, p = base + start, stop = base + end;
    if (start < 0 || end > buf.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "scan: the range is outside the buffer");
        goto done;
    }
    /* a text is never longer than its line; an EOS after it may be: a line with a non-empty text has 8
       bytes at least ({"":"x"}) */
    Py_ssize_t in_len = head.len + (end - start);
    texts = PyBytes_FromStringAndSize(NULL, in_len + SLACK + (s.eos_rule ? (in_len / 8 + 1) * s.eos_n : 0));
    s.items = PyList_New(0);
    if (!texts || !s.items)
        goto done;
    s.t0 = s.o = (unsigned char *)PyBytes_AS_STRING(texts);
    Py_ssize_t pos = 0;
    if (head.len) {
        /* the line begun before this buffer: the head, then this buffer up to its first newline */
        cptr nl = memchr(p, '\n', stop - p);
        cptr next = nl ? nl + 1 : stop;
        Py_ssize_t n = head.len + (next - p);
        joined = PyMem_Malloc(n);
        if (!joined) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(joined, head.buf, head.len);
        memcpy(joined + head.len, p, next - p);
        if (!one_line(&s, joined, joined + n, 0))
            goto done;
        pos = n;
        p = next;
    }
    while (p < stop) {
        cptr next = one_line(&s, p, stop, pos);
        if (!next)
            goto done;
        pos += next - p;
        p = next;
    }
    if (_PyBytes_Resize(&texts, s.o - s.t0) < 0)
        goto done;
    result = Py_BuildValue("(Oy#Oy#)", texts, s.ends ? (const char *)s.ends : "", (Py_ssize_t)(s.nread * 8),
                           s.items, s.added ? s.added : "", s.nread);
done:
    PyMem_Free(joined);
    PyMem_Free(s.ends);
    PyMem_Free(s.added);
    Py_XDECREF(texts);
    Py_XDECREF(s.items);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&head);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, start, end, head, text_key, id_key, strip, eos, eos_rule) -> (texts, ends, items, added): "
     "see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "jsonl_scan", "prepare's JSON lines to UTF-8", -1,
                                    methods};

PyMODINIT_FUNC PyInit_jsonl_scan(void) { return PyModule_Create(&module); }
