// A pg_claim worker with pgjdbc. Connects with the libpq environment (PGHOST, ...).
// stringtype=unspecified sends strings untyped, so that they can be interval or jsonb arguments.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public class Worker {
    static final String STALE = "PC001"; // the token is not the live claim (lease lost, item finished)

    // The user's write and complete commit together, fenced by assert_token.
    static boolean finish(Connection conn, long id, long token, String address) throws SQLException {
        conn.setAutoCommit(false);
        try (PreparedStatement fence = conn.prepareStatement("SELECT claim.assert_token(?)");
             PreparedStatement insert = conn.prepareStatement(
                 "INSERT INTO sent_mail (item_id, token, address) VALUES (?, ?, ?)");
             PreparedStatement complete = conn.prepareStatement(
                 "SELECT claim.complete(?, jsonb_build_array(?::text))")) {
            fence.setLong(1, token);
            fence.execute();
            insert.setLong(1, id);
            insert.setLong(2, token);
            insert.setString(3, address);
            insert.execute();
            complete.setLong(1, token);
            complete.setString(2, address);
            complete.execute();
            conn.commit();
            return true;
        } catch (SQLException e) {
            conn.rollback();
            if (!STALE.equals(e.getSQLState())) throw e;
            System.out.println("stale " + token + " " + e.getSQLState()); // nothing of this item was written
            return false;
        } finally {
            conn.setAutoCommit(true);
        }
    }

    public static void main(String[] args) throws SQLException {
        String url = "jdbc:postgresql://" + System.getenv("PGHOST") + ":" + System.getenv("PGPORT") + "/"
            + System.getenv("PGDATABASE") + "?stringtype=unspecified";
        try (Connection conn = DriverManager.getConnection(url, System.getenv("PGUSER"), System.getenv("PGPASSWORD"));
             PreparedStatement claim = conn.prepareStatement(
                 "SELECT id, token, payload->>'to' FROM claim.claim_next(?, wait => ?)");
             PreparedStatement fail = conn.prepareStatement("SELECT claim.fail(?, ?)");
             PreparedStatement extend = conn.prepareStatement("SELECT claim.extend(?, ?)")) {
            long lastId = 0, lastToken = 0;
            String lastAddress = null;
            while (true) {
                claim.setString(1, "emails");
                claim.setString(2, "1 second");
                long id, token;
                String address;
                try (ResultSet rs = claim.executeQuery()) {
                    if (!rs.next()) break; // the queue stayed empty for a second
                    id = rs.getLong(1);
                    token = rs.getLong(2);
                    address = rs.getString(3);
                }
                if (address == null) {
                    fail.setLong(1, token);
                    fail.setString(2, "no address");
                    fail.execute();
                    System.out.println("failed " + id + " " + token);
                    continue;
                }
                extend.setLong(1, token);
                extend.setString(2, "30 seconds"); // heartbeat
                extend.execute();
                if (finish(conn, id, token, address)) System.out.println("done " + id + " " + token);
                lastId = id;
                lastToken = token;
                lastAddress = address;
            }
            // a finished token again: what a worker that lost its lease sees
            if (lastAddress != null) finish(conn, lastId, lastToken, lastAddress);
        }
    }
}
