package dev.jnccl.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * jnccl's own JSON: what it writes it reads back unchanged (random nested values, every character
 * that needs an escape), it reads JSON that others write (escapes it never writes, compact layout),
 * and malformed text is refused with the offset.
 */
class JsonTest {

    @Test
    void randomNestedValuesRoundTrip() {
        SplittableRandom random = new SplittableRandom(new SplittableRandom().nextLong());
        for (int i = 0; i < 200; i++) {
            Object value = value(random, 3);
            assertEquals(value, Json.read(Json.write(value)), () -> Json.write(value));
        }
    }

    private static Object value(SplittableRandom random, int depth) {
        return switch (random.nextInt(depth > 0 ? 7 : 5)) {
            case 0 -> text(random);
            case 1 -> random.nextLong();
            case 2 -> random.nextDouble() * 1e6 - 5e5;
            case 3 -> random.nextBoolean();
            case 4 -> null;
            case 5 -> {
                Map<String, Object> map = new LinkedHashMap<>();
                for (int n = random.nextInt(4); n > 0; n--) {
                    map.put(text(random), value(random, depth - 1));
                }
                yield map;
            }
            default -> {
                List<Object> list = new ArrayList<>();
                for (int n = random.nextInt(4); n > 0; n--) {
                    list.add(value(random, depth - 1));
                }
                yield list;
            }
        };
    }

    /** Random text with quotes, backslashes, control characters and non-ASCII letters. */
    private static String text(SplittableRandom random) {
        String alphabet = "ab\"\\/\n\r\t\u0001\u001f é€𝄞 {}[],:";
        StringBuilder sb = new StringBuilder();
        for (int n = random.nextInt(12); n > 0; n--) {
            sb.append(alphabet.charAt(random.nextInt(alphabet.length())));
        }
        return sb.toString();
    }

    @Test
    void readsCompactJsonWithEveryEscape() {
        Object value = Json.read("{\"a\":[1,-2.5e3,true,false,null],\"b\":\"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\",\"c\":{}}");
        Map<String, Object> expected = new LinkedHashMap<>();
        List<Object> a = new ArrayList<>(List.of(1L, -2500.0, true, false));
        a.add(null);
        expected.put("a", a);
        expected.put("b", "q\"\\/\b\f\n\r\té");
        expected.put("c", Map.of());
        assertEquals(expected, value);
    }

    @Test
    void malformedTextIsRefusedWithTheOffset() {
        assertMessage("Json: expected ':' at offset 5, found '1'", "{\"a\" 1}");
        assertMessage("Json: expected the end of the string at offset 4, found the end", "[\"ab");
        assertMessage("Json: expected the end of the text at offset 4, found '2'", "[1] 2");
        assertMessage("Json: expected a value at offset 1, found 'x'", "[x]");
        assertMessage("Json: expected a member name at offset 1, found '1'", "{1:2}");
    }

    @Test
    void valuesWithoutAJsonFormAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Json.write(List.of(Double.NaN)));
        assertEquals("Json: NaN has no JSON form", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Json.write(Map.of(1, 2)));
        assertEquals("Json: the key 1 is not a string", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Json.write(new Object()));
        assertTrue(e.getMessage().startsWith("Json: a java.lang.Object has no JSON form"), e.getMessage());
    }

    private static void assertMessage(String expected, String text) {
        assertEquals(expected, assertThrows(IllegalArgumentException.class, () -> Json.read(text)).getMessage());
    }
}
