package dev.jnccl.internal;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON jnccl writes and reads itself (the diagnosis dumps), so that core needs no JSON
 * library: values are {@code Map<String, ?>} (objects, in insertion order), {@code List<?>},
 * {@code String}, {@code Long} or {@code Double} (numbers; written from any {@link Number}),
 * {@code Boolean} and {@code null}. Output is indented, one member per line, for people who open the
 * file; the reader takes any JSON (RFC 8259). Not API.
 */
public final class Json {
    private static final String INDENT = "  ";

    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    /**
     * {@code value} as JSON text.
     *
     * @param value a map, list, string, number, boolean or null (nested alike)
     * @return the text, indented
     * @throws IllegalArgumentException for a value of another type, a non-string key or a non-finite number
     */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value, "");
        return out.append('\n').toString();
    }

    private static void write(StringBuilder out, Object value, String indent) {
        switch (value) {
            case null -> out.append("null");
            case String s -> quote(out, s);
            case Boolean b -> out.append(b);
            case Double d when !Double.isFinite(d) -> throw new IllegalArgumentException("Json: " + d + " has no JSON form");
            case Float f when !Float.isFinite(f) -> throw new IllegalArgumentException("Json: " + f + " has no JSON form");
            case Number n -> out.append(n);
            case Map<?, ?> map -> writeObject(out, map, indent);
            case List<?> list -> writeArray(out, list, indent);
            default -> throw new IllegalArgumentException("Json: a " + value.getClass().getName() + " has no JSON form");
        }
    }

    private static void writeObject(StringBuilder out, Map<?, ?> map, String indent) {
        if (map.isEmpty()) {
            out.append("{}");
            return;
        }
        String inner = indent + INDENT;
        out.append('{');
        String separator = "\n";
        for (Map.Entry<?, ?> member : map.entrySet()) {
            if (!(member.getKey() instanceof String key)) {
                throw new IllegalArgumentException("Json: the key " + member.getKey() + " is not a string");
            }
            out.append(separator).append(inner);
            quote(out, key);
            out.append(": ");
            write(out, member.getValue(), inner);
            separator = ",\n";
        }
        out.append('\n').append(indent).append('}');
    }

    private static void writeArray(StringBuilder out, List<?> list, String indent) {
        if (list.isEmpty()) {
            out.append("[]");
            return;
        }
        String inner = indent + INDENT;
        out.append('[');
        String separator = "\n";
        for (Object element : list) {
            out.append(separator).append(inner);
            write(out, element, inner);
            separator = ",\n";
        }
        out.append('\n').append(indent).append(']');
    }

    private static void quote(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    /**
     * The value of JSON text.
     *
     * @param text the text: one JSON value, with white space around it
     * @return maps ({@link LinkedHashMap}), lists, strings, {@code Long} or {@code Double}, booleans, null
     * @throws IllegalArgumentException naming the offset and what was expected there
     */
    public static Object read(String text) {
        Json reader = new Json(text);
        Object value = reader.value();
        reader.space();
        if (reader.at < text.length()) {
            throw reader.error("the end of the text");
        }
        return value;
    }

    private Object value() {
        space();
        if (at >= text.length()) {
            throw error("a value");
        }
        char c = text.charAt(at);
        return switch (c) {
            case '{' -> object();
            case '[' -> array();
            case '"' -> string();
            case 't' -> literal("true", Boolean.TRUE);
            case 'f' -> literal("false", Boolean.FALSE);
            case 'n' -> literal("null", null);
            default -> number();
        };
    }

    private Map<String, Object> object() {
        Map<String, Object> map = new LinkedHashMap<>();
        at++;
        space();
        if (peek('}')) {
            return map;
        }
        do {
            space();
            if (at >= text.length() || text.charAt(at) != '"') {
                throw error("a member name");
            }
            String key = string();
            space();
            expect(':');
            map.put(key, value());
            space();
        } while (peek(','));
        expect('}');
        return map;
    }

    private List<Object> array() {
        List<Object> list = new ArrayList<>();
        at++;
        space();
        if (peek(']')) {
            return list;
        }
        do {
            list.add(value());
            space();
        } while (peek(','));
        expect(']');
        return list;
    }

    private String string() {
        at++;
        StringBuilder out = new StringBuilder();
        while (at < text.length()) {
            char c = text.charAt(at++);
            if (c == '"') {
                return out.toString();
            }
            if (c == '\\') {
                out.append(escape());
            } else if (c < 0x20) {
                throw error("no control character in a string", at - 1);
            } else {
                out.append(c);
            }
        }
        throw error("the end of the string");
    }

    private char escape() {
        if (at >= text.length()) {
            throw error("an escape");
        }
        char c = text.charAt(at++);
        return switch (c) {
            case '"', '\\', '/' -> c;
            case 'b' -> '\b';
            case 'f' -> '\f';
            case 'n' -> '\n';
            case 'r' -> '\r';
            case 't' -> '\t';
            case 'u' -> unicode();
            default -> throw error("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)", at - 1);
        };
    }

    private char unicode() {
        if (at + 4 > text.length()) {
            throw error("four hex digits");
        }
        try {
            char c = (char) Integer.parseInt(text.substring(at, at + 4), 16);
            at += 4;
            return c;
        } catch (NumberFormatException e) {
            throw error("four hex digits");
        }
    }

    private Object number() {
        int start = at;
        while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) {
            at++;
        }
        String number = text.substring(start, at);
        try {
            boolean integral = number.indexOf('.') < 0 && number.indexOf('e') < 0 && number.indexOf('E') < 0;
            return integral ? (Object) Long.parseLong(number) : (Object) Double.parseDouble(number);
        } catch (NumberFormatException e) {
            throw error("a value", start);
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, at)) {
            throw error(word);
        }
        at += word.length();
        return value;
    }

    private void space() {
        while (at < text.length() && " \t\r\n".indexOf(text.charAt(at)) >= 0) {
            at++;
        }
    }

    private boolean peek(char c) {
        if (at < text.length() && text.charAt(at) == c) {
            at++;
            return true;
        }
        return false;
    }

    private void expect(char c) {
        if (!peek(c)) {
            throw error("'" + c + "'");
        }
    }

    private IllegalArgumentException error(String expected) {
        return error(expected, at);
    }

    private IllegalArgumentException error(String expected, int offset) {
        String found = offset >= text.length() ? "the end" : "'" + text.charAt(offset) + "'";
        return new IllegalArgumentException("Json: expected " + expected + " at offset " + offset + ", found " + found);
    }
}
