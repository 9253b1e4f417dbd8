// Server layer: rows as jsonb objects; see rowjson.hpp.
#include "pg/rowjson.hpp"

extern "C" {
#include "access/tupdesc.h"
#include "lib/stringinfo.h"
#include "nodes/makefuncs.h"
#include "utils/date.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
}

namespace pgclaim::pg {

namespace {

enum class Kind : uint8 {
    Skip,      // dropped column
    Bool,
    Int2,
    Int4,
    Int8,
    Numeric,   // number unless NaN or infinite
    Float,     // printed, then a number unless NaN or infinite
    Text,      // text, varchar, bpchar: the characters themselves
    DateTime,  // date, timestamp, timestamptz: ISO 8601
    Jsonb,
    Output,    // other built-in scalar types: their text output
    ToJsonb,   // everything else: to_jsonb of the value
};

struct Column {
    Kind kind;
    Oid typid;  // the column's type
    Oid base;   // its base type (domains looked through)
    JsonbValue key;
    bool out_ready;
    FmgrInfo out;      // output function (Numeric, Float, Output, rowjson_text)
    FmgrInfo tojsonb;  // ToJsonb
};

}  // namespace

struct RowJson {
    MemoryContext mcxt;
    Oid tdtypeid;
    int natts;
    Column cols[FLEXIBLE_ARRAY_MEMBER];
};

namespace {

Kind kind_of(Oid base) {
    switch (base) {
        case BOOLOID: return Kind::Bool;
        case INT2OID: return Kind::Int2;
        case INT4OID: return Kind::Int4;
        case INT8OID: return Kind::Int8;
        case NUMERICOID: return Kind::Numeric;
        case FLOAT4OID:
        case FLOAT8OID: return Kind::Float;
        case TEXTOID:
        case VARCHAROID:
        case BPCHAROID: return Kind::Text;
        case DATEOID:
        case TIMESTAMPOID:
        case TIMESTAMPTZOID: return Kind::DateTime;
        case JSONBOID: return Kind::Jsonb;
        case JSONOID: return Kind::ToJsonb;
        default: break;
    }
    // The rest of what to_jsonb prints as a string: built-in types that are
    // neither arrays nor composites (a type from an extension may have a
    // cast to json, which to_jsonb would use).
    if (base >= FirstNormalObjectId || OidIsValid(get_element_type(base)) ||
        type_is_rowtype(base) || base == ANYARRAYOID || base == ANYCOMPATIBLEARRAYOID ||
        base == RECORDARRAYOID)
        return Kind::ToJsonb;
    return Kind::Output;
}

void prepare_output(RowJson *rj, Column &c) {
    if (c.out_ready) return;
    Oid fn;
    bool varlena;
    getTypeOutputInfo(c.base, &fn, &varlena);
    fmgr_info_cxt(fn, &c.out, rj->mcxt);
    c.out_ready = true;
}

void set_string(JsonbValue *v, char *s, size_t len) {
    if (len > JENTRY_OFFLENMASK)
        error({ERRCODE_PROGRAM_LIMIT_EXCEEDED, nullptr,
               psprintf("Due to an implementation restriction, jsonb strings cannot exceed %d "
                        "bytes.",
                        JENTRY_OFFLENMASK)},
              "string too long to represent as jsonb string");
    v->type = jbvString;
    v->val.string.val = s;
    v->val.string.len = (int)len;
}

void set_cstring(JsonbValue *v, char *s) { set_string(v, s, strlen(s)); }

// A jsonb value as the JsonbValue to push: scalars unwrapped, containers as
// binary (pushJsonbValue copies their contents in).
void set_jsonb(JsonbValue *v, Jsonb *jb) {
    if (JB_ROOT_IS_SCALAR(jb)) {
        (void)JsonbExtractScalar(&jb->root, v);
        return;
    }
    v->type = jbvBinary;
    v->val.binary.data = &jb->root;
    v->val.binary.len = (int)(VARSIZE(jb) - VARHDRSZ);
}

void value_of(RowJson *rj, Column &c, Datum d, JsonbValue *v) {
    switch (c.kind) {
        case Kind::Skip: break;
        case Kind::Bool:
            v->type = jbvBool;
            v->val.boolean = DatumGetBool(d);
            return;
        case Kind::Int2:
            v->type = jbvNumeric;
            v->val.numeric = int64_to_numeric(DatumGetInt16(d));
            return;
        case Kind::Int4:
            v->type = jbvNumeric;
            v->val.numeric = int64_to_numeric(DatumGetInt32(d));
            return;
        case Kind::Int8:
            v->type = jbvNumeric;
            v->val.numeric = int64_to_numeric(DatumGetInt64(d));
            return;
        case Kind::Numeric: {
            Numeric n = DatumGetNumeric(d);
            if (!numeric_is_nan(n) && !numeric_is_inf(n)) {
                v->type = jbvNumeric;
                v->val.numeric = n;
                return;
            }
            prepare_output(rj, c);
            set_cstring(v, OutputFunctionCall(&c.out, d));
            return;
        }
        case Kind::Float: {
            prepare_output(rj, c);
            char *s = OutputFunctionCall(&c.out, d);
            if (strchr(s, 'N') != nullptr || strchr(s, 'n') != nullptr) {
                set_cstring(v, s);  // NaN, Infinity, -Infinity
                return;
            }
            v->type = jbvNumeric;
            v->val.numeric = DatumGetNumeric(DirectFunctionCall3(
                numeric_in, CStringGetDatum(s), ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
            return;
        }
        case Kind::Text: {
            struct varlena *t = PG_DETOAST_DATUM_PACKED(d);
            set_string(v, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
            return;
        }
        case Kind::DateTime:
            set_cstring(v, JsonEncodeDateTime(nullptr, d, c.base, nullptr));
            return;
        case Kind::Jsonb:
            set_jsonb(v, DatumGetJsonbP(d));
            return;
        case Kind::Output:
            prepare_output(rj, c);
            set_cstring(v, OutputFunctionCall(&c.out, d));
            return;
        case Kind::ToJsonb:
            set_jsonb(v, DatumGetJsonbP(FunctionCall1(&c.tojsonb, d)));
            return;
    }
    v->type = jbvNull;
}

}  // namespace

RowJson *rowjson_prepare(TupleDesc desc, MemoryContext mcxt) {
    MemoryContext old = MemoryContextSwitchTo(mcxt);
    RowJson *rj = (RowJson *)palloc0(offsetof(RowJson, cols) + sizeof(Column) * desc->natts);
    rj->mcxt = mcxt;
    rj->tdtypeid = desc->tdtypeid;
    rj->natts = desc->natts;
    for (int i = 0; i < desc->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(desc, i);
        Column &c = rj->cols[i];
        c.typid = att->atttypid;
        if (att->attisdropped) {
            c.kind = Kind::Skip;
            continue;
        }
        c.base = getBaseType(att->atttypid);
        c.kind = kind_of(c.base);
        c.key.type = jbvString;
        c.key.val.string.val = pstrdup(NameStr(att->attname));
        c.key.val.string.len = (int)strlen(c.key.val.string.val);
        if (c.kind == Kind::ToJsonb) {
            // to_jsonb(anyelement) reads its argument's type from fn_expr.
            fmgr_info_cxt(F_TO_JSONB, &c.tojsonb, mcxt);
            Node *arg = (Node *)makeNullConst(att->atttypid, att->atttypmod, att->attcollation);
            c.tojsonb.fn_expr = (Node *)makeFuncExpr(F_TO_JSONB, JSONBOID, list_make1(arg),
                                                     InvalidOid, InvalidOid,
                                                     COERCE_EXPLICIT_CALL);
        }
    }
    MemoryContextSwitchTo(old);
    return rj;
}

bool rowjson_matches(const RowJson *rj, TupleDesc desc) {
    if (rj->tdtypeid != desc->tdtypeid || rj->natts != desc->natts) return false;
    for (int i = 0; i < desc->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(desc, i);
        if (rj->cols[i].typid != att->atttypid ||
            (rj->cols[i].kind == Kind::Skip) != att->attisdropped)
            return false;
    }
    return true;
}

JsonbValue *rowjson_push(RowJson *rj, JsonbParseState **st, TupleTableSlot *slot) {
    slot_getallattrs(slot);
    (void)pushJsonbValue(st, WJB_BEGIN_OBJECT, nullptr);
    for (int i = 0; i < rj->natts; ++i) {
        Column &c = rj->cols[i];
        if (c.kind == Kind::Skip) continue;
        (void)pushJsonbValue(st, WJB_KEY, &c.key);
        JsonbValue v;
        if (slot->tts_isnull[i])
            v.type = jbvNull;
        else
            value_of(rj, c, slot->tts_values[i], &v);
        (void)pushJsonbValue(st, WJB_VALUE, &v);
    }
    return pushJsonbValue(st, WJB_END_OBJECT, nullptr);
}

Datum rowjson_text(RowJson *rj, TupleTableSlot *slot, AttrNumber attnum) {
    bool isnull;
    Datum d = slot_getattr(slot, attnum, &isnull);
    if (isnull) return (Datum)0;
    Column &c = rj->cols[attnum - 1];
    if (c.base == TEXTOID) {
        // A copy: the slot's memory is reused for the next row (a spilled
        // transition table reads every row into the same buffer).
        text *t = DatumGetTextPP(d);
        return PointerGetDatum(cstring_to_text_with_len(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)));
    }
    prepare_output(rj, c);
    return CStringGetTextDatum(OutputFunctionCall(&c.out, d));
}

namespace {

void put_u32(StringInfo buf, int at, uint32 v) { memcpy(buf->data + at, &v, sizeof v); }

int reserve(StringInfo buf, int bytes) {
    int at = buf->len;
    enlargeStringInfo(buf, bytes);
    memset(buf->data + at, 0, bytes);
    buf->len += bytes;
    return at;
}

// Children of a container start at int-aligned offsets (the padding counts
// as part of the child), as convertJsonbValue writes them.
void pad_to_int(StringInfo buf) {
    int pad = INTALIGN(buf->len) - buf->len;
    if (pad > 0) reserve(buf, pad);
}

// The JEntry of child i: every JB_OFFSET_STRIDE'th stores the end offset
// of the child's data instead of its length.
uint32 jentry(uint32 type, int i, uint32 len, uint32 total) {
    if (total > JENTRY_OFFLENMASK)
        error({ERRCODE_PROGRAM_LIMIT_EXCEEDED},
              "total size of jsonb array elements exceeds the maximum of %u bytes",
              JENTRY_OFFLENMASK);
    return (i % JB_OFFSET_STRIDE) == 0 ? type | total | JENTRY_HAS_OFF : type | len;
}

}  // namespace

Datum rowjson_batch_payload(const char *op, const char *schema, const char *table,
                            const Datum *rows, int n) {
    StringInfoData buf;
    initStringInfo(&buf);
    reserve(&buf, VARHDRSZ);
    // Root object. Keys are stored sorted by length, then bytes.
    const char *keys[4] = {"op", "rows", "table", "schema"};
    const char *strs[4] = {op, nullptr, table, schema};
    put_u32(&buf, reserve(&buf, sizeof(uint32)), 4 | JB_FOBJECT);
    int ent = reserve(&buf, 8 * sizeof(JEntry));
    uint32 total = 0;
    for (int i = 0; i < 4; ++i) {
        uint32 len = (uint32)strlen(keys[i]);
        appendBinaryStringInfo(&buf, keys[i], (int)len);
        total += len;
        put_u32(&buf, ent + 4 * i, jentry(JENTRY_ISSTRING, i, len, total));
    }
    for (int i = 0; i < 4; ++i) {
        int start = buf.len;
        uint32 type = JENTRY_ISSTRING;
        if (strs[i] != nullptr) {
            appendBinaryStringInfo(&buf, strs[i], (int)strlen(strs[i]));
        } else {
            // "rows": an array of the row objects, copied as they are.
            type = JENTRY_ISCONTAINER;
            pad_to_int(&buf);
            put_u32(&buf, reserve(&buf, sizeof(uint32)), (uint32)n | JB_FARRAY);
            int aent = reserve(&buf, n * (int)sizeof(JEntry));
            uint32 atotal = 0;
            for (int k = 0; k < n; ++k) {
                int s = buf.len;
                pad_to_int(&buf);
                Jsonb *jb = DatumGetJsonbP(rows[k]);
                appendBinaryStringInfo(&buf, (const char *)&jb->root, (int)(VARSIZE(jb) - VARHDRSZ));
                uint32 len = (uint32)(buf.len - s);
                atotal += len;
                put_u32(&buf, aent + 4 * k, jentry(JENTRY_ISCONTAINER, k, len, atotal));
            }
        }
        uint32 len = (uint32)(buf.len - start);
        total += len;
        put_u32(&buf, ent + 4 * (4 + i), jentry(type, 4 + i, len, total));
    }
    SET_VARSIZE(buf.data, buf.len);
    return PointerGetDatum(buf.data);
}

}  // namespace pgclaim::pg
