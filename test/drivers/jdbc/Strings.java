// String arguments from pgjdbc for interval and jsonb parameters: what works, and the error
// setString gives by default.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import org.postgresql.util.PGInterval;

public class Strings {
    static void check(String name, boolean ok) {
        System.out.println((ok ? "ok " : "not ok ") + name);
    }

    static String call(Connection conn, String sql, Object arg) throws SQLException {
        try (PreparedStatement st = conn.prepareStatement(sql)) {
            st.setString(1, "strings " + System.nanoTime());
            if (arg instanceof String) st.setString(2, (String) arg); else st.setObject(2, arg);
            st.execute();
            return "00000";
        } catch (SQLException e) {
            return e.getSQLState();
        }
    }

    public static void main(String[] args) throws SQLException {
        String url = "jdbc:postgresql://" + System.getenv("PGHOST") + ":" + System.getenv("PGPORT") + "/"
            + System.getenv("PGDATABASE");
        String user = System.getenv("PGUSER"), password = System.getenv("PGPASSWORD");
        try (Connection plain = DriverManager.getConnection(url, user, password);
             Connection unspecified = DriverManager.getConnection(url + "?stringtype=unspecified", user, password)) {
            // By default pgjdbc sends a String as varchar, and varchar has no implicit cast to interval.
            check("setString by default: 42883", call(plain, "SELECT claim.once(?, ?)", "1 hour").equals("42883"));
            check("setString with stringtype=unspecified",
                  call(unspecified, "SELECT claim.once(?, ?)", "1 hour").equals("00000"));
            check("setObject(new PGInterval(...))",
                  call(plain, "SELECT claim.once(?, ?)", new PGInterval("1 hour")).equals("00000"));
            check("setString with ?::interval", call(plain, "SELECT claim.once(?, ?::interval)", "1 hour").equals("00000"));
            // The same holds for jsonb arguments (a payload, a result).
            check("jsonb: setString by default: 42883",
                  call(plain, "SELECT ?, pg_catalog.jsonb_typeof(?)", "[1]").equals("42883"));
            check("jsonb: setString with stringtype=unspecified",
                  call(unspecified, "SELECT ?::text, pg_catalog.jsonb_typeof(?)", "[1]").equals("00000"));
        }
    }
}
