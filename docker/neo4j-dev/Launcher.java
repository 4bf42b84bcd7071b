// kg's Neo4j dev server: Neo4j 5.26 Community, embedded, with Bolt on 127.0.0.1.
//
// Run through ./run (which resolves the classpath from pom.xml once and caches it), or by hand:
//   java -Xmx512m -cp "$(cat classpath.txt)" Launcher.java --port 7687 --password change-me-please \
//        --data /tmp/kg-neo4j [--ready-file FILE] [--setting name=value ...]
//
// Settings use their neo4j.conf names and are written to DATA/neo4j.conf on every start, so what
// runs here is what a production neo4j.conf would say. Ready means: the DBMS is up, the password
// is set, and Bolt accepts a TCP connection; then "READY bolt://127.0.0.1:PORT" goes to stdout
// and, with --ready-file, the same URI is written to FILE (atomically). SIGTERM, SIGINT or the
// death of the parent process shut the DBMS down cleanly (the ready file is removed first).

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.neo4j.cli.ExecutionContext;
import org.neo4j.commandline.admin.security.SetInitialPasswordCommand;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.io.fs.DefaultFileSystemAbstraction;
import picocli.CommandLine;

public class Launcher {
    static final String HOST = "127.0.0.1";

    public static void main(String[] args) throws Exception {
        int port = 0;
        String password = null;
        Path data = null;
        Path readyFile = null;
        List<String> extra = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--port" -> port = Integer.parseInt(need(args[i], value));
                case "--password" -> password = need(args[i], value);
                case "--data" -> data = Path.of(need(args[i], value)).toAbsolutePath();
                case "--ready-file" -> readyFile = Path.of(need(args[i], value)).toAbsolutePath();
                case "--setting" -> extra.add(need(args[i], value));
                default -> fail("unknown argument " + args[i] + " (see the header of Launcher.java)");
            }
            i++;
        }
        if (port <= 0 || port > 65535) fail("--port must be a TCP port, e.g. --port 7687");
        if (password == null || password.length() < 8) fail("--password needs 8 characters or more");
        if (data == null) fail("--data DIR is required (the database lives there)");

        Files.createDirectories(data);
        // Small by default: a dev/test server on a shared 2-core machine. Heap is the JVM's -Xmx.
        List<String> conf = new ArrayList<>(List.of(
                "server.bolt.enabled=true",
                "server.bolt.listen_address=" + HOST + ":" + port,
                "server.bolt.advertised_address=" + HOST + ":" + port,
                "dbms.security.auth_enabled=true",
                "server.memory.pagecache.size=256m",
                "dbms.usage_report.enabled=false",
                // Stop in about a second instead of ten (Bolt waits 5 s twice for idle threads).
                "internal.dbms.bolt.local_enabled=false",
                "internal.server.bolt.thread_pool_shutdown_wait_time=1s",
                "internal.server.bolt.connection_shutdown_wait_time=1s"));
        conf.addAll(extra); // later lines win
        Path confFile = data.resolve("neo4j.conf");
        Files.write(confFile, conf);

        long t0 = System.nanoTime();
        boolean fresh = !Files.exists(data.resolve("data/databases/system"));
        if (fresh) setInitialPassword(data, password);
        DatabaseManagementService dbms =
                new DatabaseManagementServiceBuilder(data).loadPropertiesFromFile(confFile).build();
        CountDownLatch stopped = new CountDownLatch(1);
        final Path ready = readyFile;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                if (ready != null) Files.deleteIfExists(ready);
            } catch (IOException ignored) {
            }
            dbms.shutdown();
            stopped.countDown();
        }, "kg-neo4j-shutdown"));
        watchParent();

        if (!fresh) changePasswordIfNeeded(dbms, data, password);
        awaitBolt(port);
        String uri = "bolt://" + HOST + ":" + port;
        if (readyFile != null) {
            Path tmp = readyFile.resolveSibling(readyFile.getFileName() + ".tmp");
            Files.writeString(tmp, uri + "\n");
            Files.move(tmp, readyFile, StandardCopyOption.ATOMIC_MOVE);
        }
        System.out.printf("READY %s (started in %.1fs, pid %d)%n",
                uri, (System.nanoTime() - t0) / 1e9, ProcessHandle.current().pid());
        System.out.flush();
        stopped.await();
    }

    /**
     * The built-in user starts with password "neo4j" and must change it. Before the first start,
     * `neo4j-admin dbms set-initial-password` (run here in-process) avoids that, and costs no
     * Cypher planning on a cold JVM (ALTER USER takes seconds there).
     */
    static void setInitialPassword(Path data, String password) throws IOException {
        var context = new ExecutionContext(data, data, System.err, System.err, new DefaultFileSystemAbstraction());
        int code = new CommandLine(new SetInitialPasswordCommand(context)).execute(password);
        if (code != 0) fail("could not set the initial password (neo4j-admin exit code " + code + ")");
        Files.writeString(data.resolve(PASSWORD_MARK), digest(password));
    }

    /** A restart with another password: change it (the old one is not needed in-process). */
    static void changePasswordIfNeeded(DatabaseManagementService dbms, Path data, String password)
            throws IOException {
        Path mark = data.resolve(PASSWORD_MARK);
        if (Files.exists(mark) && Files.readString(mark).equals(digest(password))) return;
        dbms.database("system").executeTransactionally(
                "ALTER USER neo4j SET PASSWORD $pw CHANGE NOT REQUIRED", Map.of("pw", password));
        Files.writeString(mark, digest(password));
    }

    static final String PASSWORD_MARK = "kg-password.sha256";

    static String digest(String password) {
        try {
            byte[] hash = MessageDigest.getInstance("SHA-256")
                    .digest(("kg-neo4j-dev:" + password).getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(hash);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    static void awaitBolt(int port) throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(HOST, port), 1000);
                return;
            } catch (IOException e) {
                if (System.nanoTime() > deadline) fail("Bolt did not accept connections on port " + port);
                Thread.sleep(50);
            }
        }
    }

    /** Exit (running the shutdown hook) when the process that started us is gone. */
    static void watchParent() {
        ProcessHandle parent = ProcessHandle.current().parent().orElse(null);
        if (parent == null) return;
        Thread t = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(500);
                } catch (InterruptedException e) {
                    return;
                }
                long now = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
                if (now != parent.pid() || !parent.isAlive()) {
                    System.err.println("kg-neo4j: parent process " + parent.pid() + " is gone; stopping");
                    System.exit(0);
                }
            }
        }, "kg-neo4j-parent-watch");
        t.setDaemon(true);
        t.start();
    }

    static String need(String flag, String value) {
        if (value == null) fail(flag + " needs a value");
        return value;
    }

    static void fail(String message) {
        System.err.println("kg-neo4j: " + message);
        System.exit(2);
    }
}
