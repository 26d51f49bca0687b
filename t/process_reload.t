#!/usr/bin/perl

# Reload (HUP): a new generation serves the new config; the old workers exit
# with code 0 once the new ones are ready; a bad config on reload is refused
# with file:line and the running generation keeps serving.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(13);

my $conf = <<'EOF';

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    include body.conf;
}

EOF

$t->write_file_expand('sluice.conf', $conf);
$t->write_file_expand('body.conf', <<'EOF');
server {
    listen 127.0.0.1:%%PORT_8080%%;
    location / { return 200 "first"; }
}
EOF

$t->run();

like(http_get('/'), qr/\r\n\r\nfirst$/, 'first config');
my @old = $t->worker_pids();
is(scalar @old, 2, 'two workers');

$t->write_file_expand('body.conf', <<'EOF');
server {
    listen 127.0.0.1:%%PORT_8080%%;
    listen 127.0.0.1:%%PORT_8081%%;
    location / { return 200 "second"; }
}
EOF

ok($t->reload(), 'reloaded');
ok($t->waitforexit(\@old), 'old workers exited with code 0');
like(http_get('/'), qr/\r\n\r\nsecond$/, 'second config');
like(http_get('/', PeerAddr => '127.0.0.1:' . port(8081)), qr/\r\n\r\nsecond$/, 'new listener');
like($t->read_file('error.log'),
	qr/signal 1 \(SIGHUP\) received from \d+, reconfiguring/, 'reconfiguring logged');

# A bad config (in an included file, at line 7) keeps the second generation.

my @second = $t->worker_pids();
$t->expect_errors(qr/\[emerg\] .*unknown directive "bogus" in .*body\.conf:7/);
$t->write_file('body.conf', "server {\n listen 127.0.0.1:" . port(8080)
	. ";\n location / {\n return 200 third;\n }\n}\nbogus;\n");
$t->signal('HUP');
ok($t->waitforlog(qr/\[emerg\] \d+#0: unknown directive "bogus" in \S+body\.conf:7/),
	'bad config refused with file:line');
like(http_get('/'), qr/\r\n\r\nsecond$/, 'old config still serves');
is(join(',', $t->worker_pids()), join(',', @second), 'workers untouched');

# The listener the bad reload would have dropped is still there, and a good
# config after a bad one works.

like(http_get('/', PeerAddr => '127.0.0.1:' . port(8081)), qr/second$/, 'listener kept');
$t->write_file_expand('body.conf', <<'EOF');
server {
    listen 127.0.0.1:%%PORT_8080%%;
    location / { return 200 "fourth"; }
}
EOF
ok($t->reload(), 'reloaded again');
ok($t->waitforexit(\@second) && http_get('/') =~ /fourth$/, 'fourth config');
